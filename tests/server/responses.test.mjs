// POST /v1/responses end to end over the bundled default model (CPU), with the official openai
// npm client's responses.create and responses.stream. Each response must say what the same
// conversation says through /v1/chat/completions (whose reasoning and tool parsing e2e.test.mjs
// checks against the raw text). Run: node --test tests/server/responses.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, stopServer } from './serve_util.mjs';

let server, client;

before(async () => {
  server = await startServer(['--served-model-name', 'tiny']);
  client = new OpenAI({ apiKey: 'none', baseURL: `${server.base}/v1`, maxRetries: 0 });
});

after(async () => {
  const { code } = await stopServer(server);
  assert.equal(code, 0, `strata serve exit code\n${server.log()}`);
});

const post = (path, body) =>
  fetch(`${server.base}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });

const reasoningText = (r) =>
  r.output.filter((o) => o.type === 'reasoning').flatMap((o) => o.content.map((c) => c.text)).join('');
const messageText = (r) =>
  r.output.filter((o) => o.type === 'message').flatMap((o) => o.content.map((c) => c.text)).join('');

function checkResponseShape(r, maxTokens) {
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, 'tiny');
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= maxTokens);
  for (const o of r.output) {
    assert.ok(['reasoning', 'message', 'function_call'].includes(o.type), o.type);
    assert.equal(typeof o.id, 'string');
    if (o.type === 'message') {
      assert.equal(o.role, 'assistant');
      for (const c of o.content) assert.equal(c.type, 'output_text');
    }
  }
  // The client's convenience (responses.create adds it; a stream's finalResponse does not).
  if (r.output_text !== undefined) assert.equal(r.output_text, messageText(r));
}

// The same conversation through chat completions.
async function chatOf(messages, extra = {}) {
  const c = await client.chat.completions.create({ model: 'tiny', messages, temperature: 0, ...extra });
  return c.choices[0];
}

test('responses.create: a string input says what chat says, reasoning as a reasoning item', async () => {
  const input = 'What is two plus two?';
  const r = await client.responses.create({ model: 'tiny', input, max_output_tokens: 40, temperature: 0 });
  checkResponseShape(r, 40);
  const chat = await chatOf([{ role: 'user', content: input }], { max_tokens: 40 });
  assert.equal(reasoningText(r), chat.message.reasoning_content ?? '');
  assert.equal(r.output_text, chat.message.content ?? '');
  assert.equal(r.status, chat.finish_reason === 'length' ? 'incomplete' : 'completed');
  assert.equal(r.usage.output_tokens, (await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: input }], temperature: 0, max_tokens: 40 })).usage.completion_tokens);
  assert.equal(r.max_output_tokens, 40);
  assert.equal(r.store, false);
});

test('responses with thinking on: the reasoning item holds chat\'s reasoning_content, streamed too', async () => {
  const input = 'What is two plus two?';
  const req = { model: 'tiny', input, max_output_tokens: 40, temperature: 0, chat_template_kwargs: { enable_thinking: true } };
  const r = await client.responses.create(req);
  checkResponseShape(r, 40);
  const chat = await chatOf([{ role: 'user', content: input }], { max_tokens: 40, chat_template_kwargs: { enable_thinking: true } });
  assert.ok((chat.message.reasoning_content ?? '').length > 0, 'the model thinks');
  assert.equal(r.output[0].type, 'reasoning');
  assert.equal(reasoningText(r), chat.message.reasoning_content);
  assert.equal(r.output_text, chat.message.content ?? '');
  const stream = client.responses.stream(req);
  let reasoning = '';
  for await (const e of stream) if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
  const final = await stream.finalResponse();
  assert.equal(reasoning, chat.message.reasoning_content);
  assert.equal(reasoningText(final), reasoningText(r));
  assert.deepEqual(final.output.map((o) => o.type), r.output.map((o) => o.type));
});

test('responses.create: instructions and a message list with input_text parts', async () => {
  const r = await client.responses.create({
    model: 'tiny', instructions: 'You are terse.', max_output_tokens: 24, temperature: 0,
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Name a colour.' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Blue.' }] },
      { role: 'user', content: 'Another one?' },
    ],
  });
  checkResponseShape(r, 24);
  assert.equal(r.instructions, 'You are terse.');
  const chat = await chatOf([
    { role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a colour.' },
    { role: 'assistant', content: 'Blue.' }, { role: 'user', content: 'Another one?' }], { max_tokens: 24 });
  assert.equal(r.output_text, chat.message.content ?? '');
  assert.equal(reasoningText(r), chat.message.reasoning_content ?? '');
});

test('responses.stream: the events build the same response, in order, numbered', async () => {
  const req = { model: 'tiny', input: 'Tell me a short story.', max_output_tokens: 32, temperature: 0 };
  const whole = await client.responses.create(req);
  const stream = client.responses.stream(req);
  const events = [];
  let deltas = '', reasoningDeltas = '';
  for await (const e of stream) {
    events.push(e);
    if (e.type === 'response.output_text.delta') deltas += e.delta;
    if (e.type === 'response.reasoning_text.delta') reasoningDeltas += e.delta;
  }
  const final = await stream.finalResponse();
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[0].response.status, 'in_progress');
  assert.equal(events[1].type, 'response.in_progress');
  assert.equal(events.at(-1).type, 'response.completed');
  checkResponseShape(final, 32);
  assert.equal(messageText(final), whole.output_text);
  assert.equal(deltas, whole.output_text);
  assert.equal(reasoningDeltas, reasoningText(whole));
  assert.deepEqual(final.output.map((o) => o.type), whole.output.map((o) => o.type));
  // The same tokens (the second run finds the prompt in the prefix cache).
  assert.deepEqual({ ...final.usage, input_tokens_details: null }, { ...whole.usage, input_tokens_details: null });
  // Every item opens, (for text) opens its part, and closes, in the documented order.
  const types = events.map((e) => e.type);
  const msg = whole.output.findIndex((o) => o.type === 'message');
  const at = (type) => events.findIndex((e) => e.type === type && e.output_index === msg);
  const order = ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done'];
  if (whole.output_text.length > 0) {
    const positions = order.map(at);
    assert.ok(positions.every((p) => p >= 0), `${order} in ${types}`);
    assert.deepEqual([...positions].sort((a, b) => a - b), positions);
    assert.equal(events[at('response.output_text.done')].text, whole.output_text);
  }
  // stream: true on create gives the same events.
  const raw = await client.responses.create({ ...req, stream: true });
  const again = [];
  for await (const e of raw) again.push(e.type);
  assert.deepEqual(again, types);
});

test('responses with flat function tools: function_call items as chat tool_calls', async () => {
  const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', parameters }];
  const input = 'What is the weather in Paris? Use the tool.';
  const r = await client.responses.create({ model: 'tiny', input, tools, max_output_tokens: 48, temperature: 0 });
  checkResponseShape(r, 48);
  assert.deepEqual(r.tools, tools);
  const chat = await chatOf([{ role: 'user', content: input }], {
    max_tokens: 48, tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters } }] });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, chat.message.tool_calls?.length ?? 0);
  calls.forEach((c, i) => {
    assert.equal(c.name, chat.message.tool_calls[i].function.name);
    assert.equal(c.arguments, chat.message.tool_calls[i].function.arguments);
    assert.match(c.call_id, /^call_/);
    assert.equal(c.status, 'completed');
  });
  assert.equal(r.output_text, chat.message.content ?? '');
  // A follow-up turn with the call and its output as input items is accepted.
  const next = await client.responses.create({
    model: 'tiny', tools, max_output_tokens: 8, temperature: 0,
    input: [{ role: 'user', content: input },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c": 21}' }],
  });
  checkResponseShape(next, 8);
  // The stream of a tool-using request builds the same items.
  const stream = client.responses.stream({ model: 'tiny', input, tools, max_output_tokens: 48, temperature: 0 });
  for await (const _ of stream);
  const final = await stream.finalResponse();
  assert.deepEqual(final.output.map((o) => [o.type, o.name ?? null, o.arguments ?? null]),
    r.output.map((o) => [o.type, o.name ?? null, o.arguments ?? null]));
});

test('responses: unsupported and bad fields are 400s naming the field', async () => {
  const cases = [
    [{}, 'input'],
    [{ input: 3 }, 'input'],
    [{ input: [] }, 'input'],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0].type'],
    [{ input: [{ role: 'robot', content: 'x' }] }, 'input[0].role'],
    [{ input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id'],
    [{ input: 'x', background: true }, 'background'],
    [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ input: 'x', tools: [{ type: 'function' }] }, 'tools[0].name'],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
    [{ input: 'x', temperature: 'hot' }, 'temperature'],
    [{ input: 'x', text: { format: { type: 'json_schema' } } }, 'text.format'],
    [{ input: 'x', instructions: 5 }, 'instructions'],
  ];
  for (const [body, param] of cases) {
    const res = await post('/v1/responses', { model: 'tiny', ...body });
    assert.equal(res.status, 400, JSON.stringify(body));
    const e = (await res.json()).error;
    assert.equal(e.param, param, `${JSON.stringify(body)}: ${e.message}`);
  }
  // store is accepted and ignored: nothing is stored.
  const r = await client.responses.create({ model: 'tiny', input: 'Hi', max_output_tokens: 2, store: true });
  assert.equal(r.store, false);
});
