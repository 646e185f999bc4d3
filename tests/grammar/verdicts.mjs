// ajv's verdict on every instance of corpus.json (a text JSON.parse refuses is invalid) (JSON Schema 2020-12, ajv-formats' full
// formats). `node verdicts.mjs` writes verdicts.json; `node verdicts.mjs --check` (a ctest
// test) fails unless the committed verdicts.json is what ajv says now.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const here = dirname(fileURLToPath(import.meta.url));
const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));
const ajv = new Ajv2020({ strictSchema: true, strictTypes: false, strictTuples: false, strictRequired: false });
addFormats(ajv);

const verdicts = {};
for (const { name, schema, instances } of corpus) {
  if (name in verdicts) throw new Error(`duplicate schema name: ${name}`);
  const validate = ajv.compile(schema);
  // A text that is not JSON (the whitespace section's malformed texts) is invalid.
  const parse = (text) => { try { return { value: JSON.parse(text) }; } catch { return null; } };
  verdicts[name] = instances.map((text) => { const p = parse(text); return p !== null && validate(p.value); });
}
const text = JSON.stringify(verdicts, null, 1) + "\n";
const file = join(here, "verdicts.json");
if (process.argv.includes("--check")) {
  const committed = readFileSync(file, "utf8");
  if (committed !== text) {
    console.error("verdicts.json differs from ajv's verdicts: run node tests/grammar/verdicts.mjs");
    process.exit(1);
  }
  const all = Object.values(verdicts).flat();
  console.log(`verdicts.json agrees with ajv: ${corpus.length} schemas, ${all.length} instances, ` +
              `${all.filter(Boolean).length} valid`);
} else {
  writeFileSync(file, text);
  console.log(`wrote ${file}`);
}
