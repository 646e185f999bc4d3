// End-to-end tests of `strata serve` over the bundled default model (CPU), driven by the
// official openai npm client and by curl. Run: node --test tests/server/e2e.test.mjs
// (STRATA_BINARY picks the binary; default build/strata).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, stopServer, metrics, metric, waitIdle, readSse } from './serve_util.mjs';

const KEY = 'sk-strata-test';
let server, client;

before(async () => {
  server = await startServer(['--api-key', KEY, '--served-model-name', 'tiny']);
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.base}/v1`, maxRetries: 0 });
});

after(async () => {
  const { code } = await stopServer(server);
  assert.equal(code, 0, `strata serve exit code\n${server.log()}`);
});

const post = (path, body, headers = {}) =>
  fetch(`${server.base}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

function curl(args) {
  return execFileSync('curl', ['-s', '-S', '--max-time', '120', ...args], { encoding: 'utf8' });
}

test('models, health, auth', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'tiny');
  assert.equal((await fetch(`${server.base}/health`)).status, 200);
  const noKey = await fetch(`${server.base}/v1/models`);
  assert.equal(noKey.status, 401);
  assert.equal((await noKey.json()).error.type, 'authentication_error');
  const wrong = await fetch(`${server.base}/v1/models`, { headers: { Authorization: 'Bearer nope' } });
  assert.equal(wrong.status, 401);
  // curl: the same with and without the key.
  assert.match(curl(['-H', `Authorization: Bearer ${KEY}`, `${server.base}/v1/models`]), /"id":"tiny"/);
  assert.match(curl(['-o', '/dev/null', '-w', '%{http_code}', `${server.base}/v1/models`]), /^401$/);
});

test('completions: greedy is deterministic, usage adds up, echo', async () => {
  const req = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.ok(a.choices[0].text.length > 0);
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 12);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 12);
  const e = await client.completions.create({ ...req, echo: true });
  assert.equal(e.choices[0].text, 'Once upon a time' + a.choices[0].text);
  // Token-id prompts and several prompts in one request: choices ordered by prompt.
  const tok = await (await post('/tokenize', { prompt: 'Once upon a time' })).json();
  const multi = await client.completions.create({ ...req, prompt: [tok.tokens, 'Hello'] });
  assert.equal(multi.choices.length, 2);
  assert.equal(multi.choices[0].text, a.choices[0].text);
  assert.deepEqual(multi.choices.map((c) => c.index), [0, 1]);
});

// vLLM's shape of echo with logprobs: prompt then completion in every list, null at the first
// prompt token, each later prompt token's top_logprobs the N best plus itself. lm-evaluation-
// harness's local-completions scores log-likelihoods this way (echo, logprobs 1, max_tokens 0).
function checkEchoLogprobs(lp, promptTokens, total, top) {
  assert.deepEqual(Object.keys(lp).sort(), ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
  for (const k of Object.keys(lp)) assert.equal(lp[k].length, total, k);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 1; i < total; i++) {
    assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length, `text_offset[${i}]`);
    assert.equal(typeof lp.token_logprobs[i], 'number');
    assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}]`);
    const alts = lp.top_logprobs[i];
    const size = Object.keys(alts).length;
    if (i < promptTokens) {
      assert.ok(size >= 1 && size <= top + 1, `top_logprobs[${i}] has ${size}`);
      assert.equal(alts[lp.tokens[i]], lp.token_logprobs[i], `top_logprobs[${i}] holds the prompt token`);
      assert.ok(Math.max(...Object.values(alts)) >= lp.token_logprobs[i]);
    } else {
      assert.ok(size >= 1 && size <= top, `top_logprobs[${i}] has ${size}`);
    }
  }
}

test('completions: echo with logprobs returns the prompt logprobs (vLLM shape)', async () => {
  const prompt = 'The capital of France is Paris, and the capital of Italy is';
  const tok = await (await post('/tokenize', { prompt })).json();
  const n = tok.tokens.length;
  const base = { model: 'tiny', prompt, echo: true, temperature: 0 };
  // The prompt alone.
  const scored = await client.completions.create({ ...base, logprobs: 1, max_tokens: 0 });
  const s = scored.choices[0];
  assert.equal(s.text, prompt);
  assert.equal(s.finish_reason, 'length');
  assert.equal(scored.usage.prompt_tokens, n);
  assert.equal(scored.usage.completion_tokens, 0);
  checkEchoLogprobs(s.logprobs, n, n, 1);
  assert.equal(s.logprobs.tokens.join(''), prompt);
  // With a completion: the same prompt part, then the completion's tokens.
  const plain = await client.completions.create({ model: 'tiny', prompt, max_tokens: 5, temperature: 0 });
  const gen = await client.completions.create({ ...base, logprobs: 2, max_tokens: 5 });
  const g = gen.choices[0];
  assert.equal(g.text, prompt + plain.choices[0].text);
  checkEchoLogprobs(g.logprobs, n, n + 5, 2);
  for (let i = 1; i < n; i++) assert.ok(Math.abs(g.logprobs.token_logprobs[i] - s.logprobs.token_logprobs[i]) < 1e-4);
  assert.equal(g.logprobs.tokens.join(''), g.text);
  // Streaming: the echo comes with the prompt's logprobs, and the lists add up to the same.
  const stream = await client.completions.create({ ...base, logprobs: 2, max_tokens: 5, stream: true });
  let text = '';
  const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.logprobs) for (const k of Object.keys(joined)) joined[k].push(...c.logprobs[k]);
    }
  }
  assert.equal(text, g.text);
  assert.deepEqual(joined.tokens, g.logprobs.tokens);
  assert.deepEqual(joined.text_offset, g.logprobs.text_offset);
  checkEchoLogprobs(joined, n, n + 5, 2);
  // Streaming with max_tokens 0: the prompt alone.
  const only = await client.completions.create({ ...base, logprobs: 1, max_tokens: 0, stream: true });
  let onlyText = '', onlyTokens = 0;
  for await (const chunk of only) {
    for (const c of chunk.choices) {
      onlyText += c.text;
      if (c.logprobs) onlyTokens += c.logprobs.tokens.length;
    }
  }
  assert.equal(onlyText, prompt);
  assert.equal(onlyTokens, n);
  // max_tokens 0 without echo names the field.
  const bad = await post('/v1/completions', { prompt, max_tokens: 0 });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'max_tokens');
});

test('completions streaming equals non-streaming, with usage', async () => {
  const req = { model: 'tiny', prompt: 'The weather today', max_tokens: 16, temperature: 0 };
  const whole = await client.completions.create(req);
  const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 16);
  // curl sees the raw SSE framing, ending with [DONE].
  const raw = curl(['-N', '-H', `Authorization: Bearer ${KEY}`, '-H', 'Content-Type: application/json',
    '-d', JSON.stringify({ ...req, stream: true }), `${server.base}/v1/completions`]);
  const events = raw.split('\n\n').filter(Boolean);
  assert.equal(events.at(-1), 'data: [DONE]');
  assert.ok(events.slice(0, -1).every((e) => e.startsWith('data: {')));
  assert.equal(events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0].text).join(''), whole.choices[0].text);
});

test('chat: n > 1 with a seed, stop strings, logprobs', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];
  const r = await client.chat.completions.create({ model: 'tiny', messages, n: 3, temperature: 1.0, seed: 7, max_tokens: 10 });
  assert.equal(r.object, 'chat.completion');
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) assert.equal(c.message.role, 'assistant');
  const lengths = r.choices.filter((c) => c.finish_reason === 'length').length;
  assert.ok(r.usage.completion_tokens >= lengths * 10 + (3 - lengths) && r.usage.completion_tokens <= 30);
  const again = await client.chat.completions.create({ model: 'tiny', messages, n: 3, temperature: 1.0, seed: 7, max_tokens: 10 });
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));

  // A stop string taken from the greedy output cuts it there.
  const greedy = await client.chat.completions.create({ model: 'tiny', messages, temperature: 0, max_tokens: 24 });
  const full = greedy.choices[0].message.content;
  assert.ok(full.length > 6, full);
  const stop = full.slice(3, 6);
  const cut = await client.chat.completions.create({ model: 'tiny', messages, temperature: 0, max_tokens: 24, stop: [stop] });
  assert.equal(cut.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');

  // logprobs: one entry per generated token; the greedy token is the top alternative.
  const lp = await client.chat.completions.create({ model: 'tiny', messages, temperature: 0, max_tokens: 6, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
  assert.equal(content.map((t) => t.token).join(''), lp.choices[0].message.content);
});

test('chat streaming equals non-streaming; reasoning split matches the raw completion', async () => {
  const messages = [{ role: 'user', content: 'What is two plus two?' }];
  for (const enable_thinking of [false, true]) {
    const req = { model: 'tiny', messages, temperature: 0, max_tokens: 40, chat_template_kwargs: { enable_thinking } };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    let content = '', reasoning = '', roles = 0, finish = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      if (d.role) roles++;
      content += d.content ?? '';
      reasoning += d.reasoning_content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    const m = whole.choices[0].message;
    assert.equal(roles, 1);
    assert.equal(content, m.content ?? '');
    assert.equal(reasoning, m.reasoning_content ?? '');
    assert.equal(finish, whole.choices[0].finish_reason);
    // The same prompt through /v1/completions gives the raw text that was split.
    const tok = await (await post('/tokenize', { messages, chat_template_kwargs: { enable_thinking } })).json();
    const raw = (await client.completions.create({ model: 'tiny', prompt: tok.tokens, temperature: 0, max_tokens: 40 })).choices[0].text;
    if (enable_thinking) {
      const close = raw.indexOf('</think>');
      const expectReasoning = close < 0 ? raw : raw.slice(0, close);
      const expectContent = close < 0 ? '' : raw.slice(close + '</think>'.length);
      assert.equal(m.reasoning_content ?? '', expectReasoning);
      assert.equal(m.content ?? '', expectContent);
      assert.ok(expectReasoning.length > 0);
    } else {
      assert.equal(m.content, raw);
      assert.equal(m.reasoning_content, null);
    }
  }
});

test('chat with tools: template wiring, tool messages, no spurious calls', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ];
  const tok = await (await post('/tokenize', { messages, tools })).json();
  const prompt = (await (await post('/detokenize', { tokens: tok.tokens })).json()).prompt;
  assert.match(prompt, /<function=get_weather>\n<parameter=city>\nParis\n<\/parameter>/);
  assert.match(prompt, /<tool_response>\n\{"temp_c": 21\}\n<\/tool_response>/);
  assert.match(prompt, /"name": "get_weather"/);
  const r = await client.chat.completions.create({ model: 'tiny', messages, tools, temperature: 0, max_tokens: 16 });
  const raw = (await client.completions.create({ model: 'tiny', prompt: tok.tokens, temperature: 0, max_tokens: 16 })).choices[0].text;
  const msg = r.choices[0].message;
  if (!raw.includes('<tool_call>')) {
    assert.equal(msg.content, raw);
    assert.equal(msg.tool_calls, undefined);
  } else if (msg.tool_calls?.length) {
    // The model called: each call names a given tool with JSON-object arguments, and the
    // content is the text before the first call.
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    for (const call of msg.tool_calls) {
      assert.equal(call.type, 'function');
      assert.match(call.id, /^call_/);
      assert.ok(tools.some((t) => t.function.name === call.function.name), call.function.name);
      assert.equal(typeof JSON.parse(call.function.arguments), 'object');
    }
    assert.ok(raw.startsWith(msg.content ?? ''), `${msg.content} is not the text before the call in ${raw}`);
  } else {
    // A block that parses as no call is given back as content, tags included.
    assert.equal(msg.content, raw);
    assert.equal(r.choices[0].finish_reason === 'tool_calls', false);
  }
  // tool_choice naming an unknown function is a 400 naming the field.
  const bad = await post('/v1/chat/completions', { messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'tool_choice');
});

test('errors are OpenAI-shaped and never 500', async () => {
  const cases = [
    ['/v1/chat/completions', '{"messages": [', 400, null],
    ['/v1/chat/completions', { messages: 'hi' }, 400, 'messages'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }, 400, 'temperature'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], temperature: -1 }, 400, 'temperature'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 100000 }, 400, 'max_tokens'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], model: 'gpt-9' }, 404, 'model'],
    ['/v1/completions', { prompt: [1, 2, 99999999] }, 400, null],
    ['/v1/completions', { prompt: 'x '.repeat(20000) }, 400, 'prompt'],
    ['/v1/completions', {}, 400, 'prompt'],
    ['/v1/nothing', {}, 404, null],
  ];
  for (const [path, body, status, param] of cases) {
    const r = await post(path, body);
    assert.equal(r.status, status, `${path} ${JSON.stringify(body).slice(0, 80)}`);
    const e = (await r.json()).error;
    assert.equal(typeof e.message, 'string');
    assert.ok(e.message.length > 0);
    if (param) assert.equal(e.param, param, e.message);
  }
  // A body over the limit (16 MiB) is a 413 with a JSON body.
  const big = await post('/v1/completions', JSON.stringify({ prompt: 'a'.repeat(17 << 20) }));
  assert.equal(big.status, 413);
  assert.match((await big.json()).error.message, /over the limit/);
  // The openai client surfaces the status.
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [] }), (err) => err.status === 400);
});

test('tokenize and detokenize round-trip', async () => {
  const t = await (await post('/tokenize', { prompt: 'Hello world', return_token_strs: true })).json();
  assert.equal(t.count, t.tokens.length);
  assert.equal(t.token_strs.length, t.count);
  const d = await (await post('/detokenize', { tokens: t.tokens })).json();
  assert.equal(d.prompt, 'Hello world');
  assert.equal((await post('/detokenize', { tokens: [-1] })).status, 400);
});

test('metrics move and the engine ends idle', async () => {
  const before = await metrics(server.base);
  await client.completions.create({ model: 'tiny', prompt: 'Counting tokens', max_tokens: 5, temperature: 0 });
  const after = await waitIdle(server.base);
  const delta = (name) => metric(after, name) - metric(before, name);
  assert.equal(delta('strata:generation_tokens_total'), 5);
  assert.ok(delta('strata:prompt_tokens_total') > 0);
  assert.equal(delta('strata:time_to_first_token_seconds_count'), 1);
  assert.equal(delta('strata:e2e_request_latency_seconds_count'), 1);
  assert.ok(metric(after, 'strata:request_success_total') > 0);
  assert.ok(metric(after, 'strata:prefix_cache_queries_total') > 0);
  assert.ok(metric(after, 'strata:kv_cache_pages_total') > 0);
  assert.ok(metric(after, 'strata:request_rejected_total') > 0);  // the error test's 4xx
});

test('SIGTERM drains with a deadline; a second signal exits at once', async () => {
  const exitOf = (s) => new Promise((resolve) => {
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() }));
  });
  const long = { prompt: 'The kernel', max_tokens: 4000, ignore_eos: true };
  // The deadline: the request in flight is aborted after 1 s and the server exits cleanly.
  let s = await startServer(['--shutdown-timeout', '1']);
  let exited = exitOf(s);
  let reply = fetch(`${s.base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(long) });
  await new Promise((r) => setTimeout(r, 500));
  let sent = Date.now();
  s.proc.kill('SIGTERM');
  const body = await (await reply).json();
  assert.equal(body.choices[0].finish_reason, 'abort');
  let e = await exited;
  assert.equal(e.code, 0);
  assert.ok(e.at - sent < 5000, `exited ${e.at - sent} ms after SIGTERM`);
  // A second signal does not wait for the 60 s drain.
  s = await startServer(['--shutdown-timeout', '60']);
  exited = exitOf(s);
  reply = fetch(`${s.base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(long) }).catch(() => null);
  await new Promise((r) => setTimeout(r, 500));
  s.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  sent = Date.now();
  s.proc.kill('SIGINT');
  e = await exited;
  assert.equal(e.code, 128 + 2);
  assert.ok(e.at - sent < 2000, `exited ${e.at - sent} ms after the second signal`);
  await reply;
});
