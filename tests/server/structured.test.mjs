// Structured outputs end to end (issue 21): `strata serve` over the default model (CPU) with the
// official openai npm client; every constrained output must parse and be valid for ajv
// (tests/grammar/setup.sh installs it). Run: node --test tests/server/structured.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv2020 from '../grammar/node_modules/ajv/dist/2020.js';
import addFormats from '../grammar/node_modules/ajv-formats/dist/index.js';
import { startServer, stopServer } from './serve_util.mjs';

let server, client;
const ajv = new Ajv2020({ strictSchema: true, strictTypes: false, strictRequired: false });
addFormats(ajv);

before(async () => {
  server = await startServer(['--served-model-name', 'tiny']);
  client = new OpenAI({ apiKey: 'none', baseURL: `${server.base}/v1`, maxRetries: 0 });
});

after(async () => {
  const { code } = await stopServer(server);
  assert.equal(code, 0, `strata serve exit code\n${server.log()}`);
});

// Bounded, so a complete value fits whatever the model samples.
const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 10 },
    age: { enum: [20, 30, 40] },
    pets: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 3 },
    when: { type: 'string', format: 'date' },
  },
  required: ['name', 'age', 'when'],
  additionalProperties: false,
};

function assertValid(schema, text) {
  const value = JSON.parse(text);  // throws when it does not parse
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${text}: ${ajv.errorsText(validate.errors)}`);
  return value;
}

const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];
const jsonSchemaFormat = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };

test('chat: response_format json_schema, sampled, n=3, and the same stream', async () => {
  const req = { model: 'tiny', messages, temperature: 1, seed: 11, n: 3, response_format: jsonSchemaFormat };
  const r = await client.chat.completions.create(req);
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop');
    assertValid(person, c.message.content);
  }
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const texts = ['', '', ''];
  for await (const chunk of stream) {
    for (const c of chunk.choices) texts[c.index] += c.delta.content ?? '';
  }
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
});

test('chat and completions: json_object, guided_json, structured_outputs', async () => {
  let stopped = 0;
  for (const seed of [1, 2]) {
    const chat = await client.chat.completions.create({
      model: 'tiny', messages, temperature: 1, seed, n: 2, response_format: { type: 'json_object' }, max_tokens: 200,
    });
    // json_object is unbounded: an output that ends must be an object, one cut by length a prefix of one.
    for (const c of chat.choices) {
      assert.ok(c.message.content.startsWith('{'), c.message.content);
      if (c.finish_reason !== 'stop') continue;
      const v = JSON.parse(c.message.content);
      assert.ok(typeof v === 'object' && !Array.isArray(v) && v !== null, c.message.content);
      ++stopped;
    }
    const cmp = await client.completions.create({
      model: 'tiny', prompt: 'A person:', temperature: 1, seed, max_tokens: 300, guided_json: person,
    });
    assert.equal(cmp.choices[0].finish_reason, 'stop');
    assertValid(person, cmp.choices[0].text);
    const so = await client.completions.create({
      model: 'tiny', prompt: 'A person:', temperature: 1, seed, max_tokens: 300, structured_outputs: { json: person },
    });
    assertValid(person, so.choices[0].text);
  }
  assert.ok(stopped > 0, 'no json_object output ended');
});

test('completions: guided_choice, guided_regex, guided_grammar', async () => {
  for (const seed of [1, 2, 3]) {
    const base = { model: 'tiny', prompt: 'Answer:', temperature: 1, seed, max_tokens: 40 };
    const c = await client.completions.create({ ...base, guided_choice: ['yes', 'no', 'maybe not'] });
    assert.ok(['yes', 'no', 'maybe not'].includes(c.choices[0].text), c.choices[0].text);
    assert.equal(c.choices[0].finish_reason, 'stop');
    const r = await client.completions.create({ ...base, guided_regex: '[A-Z][a-z]{1,4}-\\d{3}' });
    assert.match(r.choices[0].text, /^[A-Z][a-z]{1,4}-\d{3}$/);
    const g = await client.completions.create({ ...base, guided_grammar: 'root ::= "(" [0-9] ("," [0-9]){0,3} ")"' });
    assert.match(g.choices[0].text, /^\([0-9](,[0-9]){0,3}\)$/);
  }
});

test('unsupported schema features are a 400 naming the field and the feature', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'tiny', messages,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } },
    }),
    (e) => e.status === 400 && e.param === 'response_format.json_schema.schema' && /'pattern'/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: 'tiny', prompt: 'x', guided_regex: '(?=a)' }),
    (e) => e.status === 400 && e.param === 'guided_regex' && /lookahead/.test(e.message),
  );
});

test('chat: tool_choice named and required force a valid call', async () => {
  const weather = {
    type: 'object',
    properties: { city: { type: 'string', minLength: 1, maxLength: 12 }, unit: { enum: ['c', 'f'] } },
    required: ['city', 'unit'],
    additionalProperties: false,
  };
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: weather } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'], additionalProperties: false } } },
  ];
  const msgs = [{ role: 'user', content: 'What is the weather in Oslo?' }];
  for (const seed of [1, 2, 3]) {
    const named = await client.chat.completions.create({
      model: 'tiny', messages: msgs, tools, temperature: 1, seed,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const c = named.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    assertValid(weather, c.message.tool_calls[0].function.arguments);
    const required = await client.chat.completions.create({
      model: 'tiny', messages: msgs, tools, temperature: 1, seed, tool_choice: 'required', parallel_tool_calls: false,
    });
    const call = required.choices[0].message.tool_calls[0].function;
    assert.ok(['get_weather', 'get_time'].includes(call.name));
    assertValid(tools.find((t) => t.function.name === call.name).function.parameters, call.arguments);
  }
});

test('chat: tool_choice required makes one or more valid calls, one without parallel_tool_calls', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 8 } }, required: ['city'], additionalProperties: false } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'], additionalProperties: false } } },
  ];
  const msgs = [{ role: 'user', content: 'Weather and time in Oslo and Rome?' }];
  const counts = [];
  let truncated = 0;
  for (const seed of [1, 2]) {
    for (const parallel of [undefined, true, false]) {
      const extra = parallel === undefined ? {} : { parallel_tool_calls: parallel };
      const r = await client.chat.completions.create({
        model: 'tiny', messages: msgs, tools, temperature: 1, seed, tool_choice: 'required', max_tokens: 400, ...extra,
      });
      const c = r.choices[0];
      const calls = c.message.tool_calls;
      if (parallel === false || c.finish_reason !== 'length') {
        assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
        assert.ok(!c.message.content, JSON.stringify(c.message));
      } else {
        // With parallel calls the grammar lets the model go on calling (as vLLM's array schema
        // does); the tiny model may do so until max_tokens. Only the start of one more call may
        // be left over (as content, or, in the XML format, as a last call cut off), and every
        // complete call still validates.
        assert.ok('<tool_call>'.startsWith(c.message.content ?? '') || (c.message.content ?? '').startsWith('<tool_call>'), JSON.stringify(c.message));
        truncated += 1;
      }
      const complete = c.finish_reason === 'length' && !c.message.content ? calls.slice(0, -1) : calls;
      assert.ok(calls.length >= 1);
      if (parallel === false) assert.equal(calls.length, 1);
      else counts.push(calls.length);
      assert.equal(new Set(calls.map((t) => t.id)).size, calls.length);
      for (const { function: f } of complete) {
        assertValid(tools.find((t) => t.function.name === f.name).function.parameters, f.arguments);
      }
    }
  }
  // The number of calls is the model's choice under the grammar (GuidedProtocol tests 2 and 3).
  console.log(`calls per parallel required response: ${counts.join(' ')} (${truncated} cut by max_tokens)`);
  // (The trained tiny model rarely ends a run of calls by itself: all four ran into max_tokens
  // when this was written. The single-call and named cases above and below must finish.)
  // A streamed forced response gives the same calls.
  const body = { model: 'tiny', messages: msgs, tools, temperature: 0, tool_choice: 'required', max_tokens: 400 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const streamed = [];
  for await (const chunk of stream) {
    for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
      if (t.id) streamed[t.index] = { name: t.function.name, arguments: '' };
      streamed[t.index].arguments += t.function.arguments ?? '';
    }
  }
  assert.deepEqual(streamed, whole.choices[0].message.tool_calls.map((t) => ({ name: t.function.name, arguments: t.function.arguments })));
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages: msgs, tools, tool_choice: 'required', parallel_tool_calls: 'no' }),
    (e) => e.status === 400 && e.param === 'parallel_tool_calls',
  );
});

test('JSON whitespace: flexible by default, none with structured_outputs.disable_any_whitespace', async () => {
  const hasWhitespace = (text) => /[ \t\n\r]/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, '""'));
  for (const seed of [1, 2, 3]) {
    const compact = await client.chat.completions.create({
      model: 'tiny', messages, temperature: 1, seed, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: person } },
      structured_outputs: { disable_any_whitespace: true },
    });
    const text = compact.choices[0].message.content;
    assertValid(person, text);
    assert.ok(!hasWhitespace(text), text);
  }
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages, structured_outputs: { json_object: true, disable_any_whitespace: 1 } }),
    (e) => e.status === 400 && e.param === 'structured_outputs.disable_any_whitespace',
  );
});

test('logprobs under a mask: refused alternatives are -9999, as vLLM', async () => {
  const c = await client.completions.create({ model: 'tiny', prompt: 'Answer:', guided_regex: 'Z', logprobs: 3, max_tokens: 5 });
  assert.equal(c.choices[0].text, 'Z');
  const top = c.choices[0].logprobs.top_logprobs[0];
  assert.equal(Object.keys(top).length, 3);
  assert.equal(top.Z, 0);
  for (const [tok, lp] of Object.entries(top)) if (tok !== 'Z') assert.equal(lp, -9999);
  const chat = await client.chat.completions.create({
    model: 'tiny', messages, guided_choice: ['Q'], logprobs: true, top_logprobs: 2, max_tokens: 5,
  });
  const entry = chat.choices[0].logprobs.content[0];
  assert.equal(entry.token, 'Q');
  assert.deepEqual(entry.top_logprobs.map((t) => typeof t.logprob), ['number', 'number']);
  assert.equal(entry.top_logprobs[1].logprob, -9999);
});
