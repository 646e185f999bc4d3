// Starts `strata serve` on a free loopback port for the end-to-end tests and stops it after.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const binary = process.env.STRATA_BINARY ?? path.join(root, 'build', 'strata');

// Resolves to {proc, base, port, log()} once the server prints its address.
export function startServer(extraArgs = [], { timeoutMs = 120000 } = {}) {
  const args = ['serve', '--port', '0', '--kv-cache-memory', '1G', '--max-num-seqs', '64', ...extraArgs];
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`strata serve did not start in ${timeoutMs} ms:\n${log}`));
    }, timeoutMs);
    proc.stderr.on('data', (chunk) => {
      log += chunk.toString();
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        const port = Number(m[1]);
        resolve({ proc, port, base: `http://127.0.0.1:${port}`, log: () => log });
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`strata serve exited with ${code} before listening:\n${log}`));
    });
  });
}

// SIGTERM, then waits for the exit code (the server must shut down cleanly).
export function stopServer(server) {
  return new Promise((resolve) => {
    server.proc.removeAllListeners('exit');
    server.proc.on('exit', (code, signal) => resolve({ code, signal }));
    server.proc.kill('SIGTERM');
  });
}

// Parses Prometheus text into {"name{labels}": value}.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

export async function metrics(base) {
  const r = await fetch(`${base}/metrics`);
  return parseMetrics(await r.text());
}

// The value of the first metric whose key starts with `name` (labels ignored).
export function metric(m, name) {
  const key = Object.keys(m).find((k) => k === name || k.startsWith(name + '{'));
  return key === undefined ? undefined : m[key];
}

// Polls until the engine is idle: nothing running or waiting, no page or state slot in use.
export async function waitIdle(base, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const m = await metrics(base);
    const idle = metric(m, 'strata:num_requests_running') === 0 &&
      metric(m, 'strata:num_requests_waiting') === 0 &&
      metric(m, 'strata:kv_cache_usage_perc') === 0 &&
      metric(m, 'strata:state_slots_usage_perc') === 0;
    if (idle) return m;
    if (Date.now() > end) throw new Error(`engine not idle after ${timeoutMs} ms: ${JSON.stringify(m)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Reads an SSE response body into its data payloads (strings), up to and including [DONE].
export async function readSse(response) {
  const text = await response.text();
  return text.split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
}
