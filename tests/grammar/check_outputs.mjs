// ctest grammar_outputs_ajv: runs the engine test StructuredOutput.DefaultModelFollowsJsonSchemas
// (tests/engine/structured_output_test.cpp), which samples the default model under JSON schemas
// and writes each output with its schema to $STRATA_STRUCTURED_OUT, then checks every output
// with ajv (JSON Schema 2020-12, ajv-formats full mode): it must parse and be valid.
// Usage: node check_outputs.mjs STRATA_TESTS_BINARY
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const binary = process.argv[2];
if (!binary) throw new Error("usage: node check_outputs.mjs STRATA_TESTS_BINARY");
const file = join(mkdtempSync(join(tmpdir(), "strata-so-")), "outputs.json");
execFileSync(binary, ["--gtest_filter=StructuredOutput.DefaultModelFollowsJsonSchemas"], {
  env: { ...process.env, STRATA_STRUCTURED_OUT: file },
  stdio: ["ignore", "inherit", "inherit"],
});
let records;
try {
  records = JSON.parse(readFileSync(file, "utf8"));
} catch (e) {
  throw new Error(`no outputs in ${file} (is models/default there, or did the test skip?): ${e.message}`);
}
if (!Array.isArray(records) || records.length === 0) throw new Error(`${file}: no outputs`);
const ajv = new Ajv2020({ strictSchema: true, strictTypes: false, strictTuples: false, strictRequired: false });
addFormats(ajv);
let bad = 0;
for (const { schema, text } of records) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    console.error(`does not parse: ${JSON.stringify(text)}: ${e.message}`);
    ++bad;
    continue;
  }
  const validate = ajv.compile(schema);
  if (!validate(value)) {
    console.error(`invalid for ${JSON.stringify(schema)}: ${text}: ${ajv.errorsText(validate.errors)}`);
    ++bad;
  }
}
console.log(`${records.length} outputs, ${bad} rejected by ajv`);
process.exit(bad === 0 ? 0 : 1);
