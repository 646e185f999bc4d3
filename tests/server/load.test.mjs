// Load and fuzz tests of `strata serve` on loopback, bounded in count and time:
//  - 64 concurrent streaming clients, a quarter of them disconnecting mid-stream; afterwards
//    every request is accounted for in /metrics, every disconnect is an abort, every page and
//    state slot is back, /health ok;
//  - mutated request bodies never get a 5xx and never take the server down.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, stopServer, metrics, metric, waitIdle } from './serve_util.mjs';

const sumOf = (m, prefix) =>
  Object.entries(m).filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);

async function streamOnce(base, i, round) {
  const disconnect = i % 4 === 3;
  const ctrl = new AbortController();
  const body = {
    messages: [{ role: 'user', content: `Client ${i} round ${round}: tell me something.` }],
    // A disconnecting client asks for more than it can get before it goes away, so that its
    // request is still running when the server notices.
    max_tokens: disconnect ? 512 : 8, ignore_eos: disconnect, temperature: 0.8, seed: i * 100 + round,
    stream: true,
  };
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: ctrl.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let text = '', chunks = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      chunks = text.split('\n\n').length - 1;
      if (disconnect && chunks >= 2) {
        ctrl.abort();
        return 'disconnected';
      }
    }
  } catch (e) {
    if (disconnect) return 'disconnected';
    throw e;
  }
  assert.ok(text.endsWith('data: [DONE]\n\n'), text.slice(-200));
  return 'done';
}

test('64 concurrent streaming clients, some disconnecting: nothing is lost', { timeout: 600000 }, async () => {
  const server = await startServer();
  try {
    const before = await metrics(server.base);
    const clients = 64, deadline = Date.now() + 60000;
    const results = { done: 0, disconnected: 0 };
    let sent = 0;
    await Promise.all(Array.from({ length: clients }, async (_, i) => {
      for (let round = 0; round < 2 && Date.now() < deadline; round++) {
        sent++;
        results[await streamOnce(server.base, i, round)]++;
      }
    }));
    assert.equal(results.done + results.disconnected, sent);
    assert.ok(results.disconnected >= 16, JSON.stringify(results));  // 16 clients, at least one round each
    const after = await waitIdle(server.base);
    const finished = sumOf(after, 'strata:request_success_total') - sumOf(before, 'strata:request_success_total');
    assert.equal(finished, sent, 'every request finished exactly once');
    const aborted = metric(after, 'strata:request_success_total{model_name="default",finished_reason="abort"}');
    assert.equal(aborted, results.disconnected, 'every disconnect aborts its request');
    assert.equal(metric(after, 'strata:kv_cache_usage_perc'), 0);
    assert.equal(metric(after, 'strata:state_slots_usage_perc'), 0);
    assert.equal((await fetch(`${server.base}/health`)).status, 200);
    console.log(`load: ${sent} requests (${results.done} read to [DONE], ${results.disconnected} disconnected, ` +
      `${aborted} aborted in the engine), pages and slots all back`);
  } finally {
    assert.equal((await stopServer(server)).code, 0);
  }
});

// A small deterministic PRNG (mulberry32) so that a failure reproduces.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const seeds = [
  { path: '/v1/completions', body: { prompt: 'Hello there', max_tokens: 4, temperature: 0.5, stop: ['x'], logprobs: 2 } },
  { path: '/v1/completions', body: { prompt: [[1, 2, 3], 'abc'], n: 2, max_tokens: 3, stream: true, echo: true } },
  { path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, logprobs: true, top_logprobs: 2 } },
  { path: '/v1/chat/completions', body: { messages: [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'text', text: 'a' }] }],
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], tool_choice: 'auto', stream: true,
    stream_options: { include_usage: true }, logit_bias: { '5': 3 }, chat_template_kwargs: { enable_thinking: true }, max_tokens: 3 } },
  { path: '/tokenize', body: { messages: [{ role: 'user', content: 'x' }] } },
  { path: '/detokenize', body: { tokens: [1, 2, 3] } },
];
const values = [null, true, false, 0, -1, 1e308, -2147483649, 4294967296, 0.5, '', 'x', '\u0000', '\ud800', [], {}, [[]], { a: [1] }, 'a'.repeat(5000)];

function mutate(r, value) {
  const pick = (a) => a[Math.floor(r() * a.length)];
  const clone = JSON.parse(JSON.stringify(value));
  const walk = (v, depth) => {
    if (v === null || typeof v !== 'object' || depth > 4) return pick(values);
    const keys = Object.keys(v);
    if (keys.length === 0 || r() < 0.2) return pick(values);
    const k = pick(keys);
    if (r() < 0.15) delete v[k];
    else v[k] = r() < 0.5 ? walk(v[k], depth + 1) : pick(values);
    return v;
  };
  const body = walk(clone, 0);
  let text = JSON.stringify(body);
  if (r() < 0.25) text = text.slice(0, Math.floor(r() * text.length));  // truncated JSON
  if (r() < 0.1) text = text.replace(/[{[]/g, (c) => c.repeat(2));      // broken nesting
  return text;
}

test('fuzzed request bodies never get a 5xx', { timeout: 600000 }, async () => {
  // A short context keeps any generation that a mutation leaves valid short.
  const server = await startServer(['--max-model-len', '48']);
  try {
    const r = rng(1234);
    const deadline = Date.now() + 45000;
    const statuses = {};
    let n = 0;
    for (; n < 600 && Date.now() < deadline; n++) {
      const s = seeds[n % seeds.length];
      const res = await fetch(`${server.base}${s.path}`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: mutate(r, s.body),
      });
      await res.arrayBuffer();
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      assert.ok(res.status < 500, `request ${n} got ${res.status}`);
    }
    assert.equal((await fetch(`${server.base}/health`)).status, 200);
    await waitIdle(server.base);
    console.log(`fuzz: ${n} mutated bodies, statuses ${JSON.stringify(statuses)}`);
    assert.ok(statuses[400] > 0 && statuses[200] > 0);
  } finally {
    assert.equal((await stopServer(server)).code, 0);
  }
});
