// Writes corpus.json: JSON schemas across the features that from_json_schema supports, each
// with candidate instances in canonical form (JSON.stringify: no whitespace, object keys in the
// schema's property order), and (section 9) the same values written with whitespace, and texts
// that are not JSON (whitespace inside a literal or a number), which verdicts.mjs marks invalid. Which instances are valid is not decided here: verdicts.mjs asks
// ajv. Usage: node make_corpus.mjs   (then node verdicts.mjs to refresh verdicts.json)
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const corpus = [];
const add = (name, schema, values) =>
  corpus.push({ name, schema, instances: values.map((v) => JSON.stringify(v)) });

// Values of every JSON type, shared by the type tests.
const scalars = [null, true, false, 0, -3, 17, 2.5, -0.001, 1e21, "", "abc", "é😀", 'a"b\\c\n',
                 "\u0001", [], [1, "x"], {}, { a: 1 }];

// 1. Types and type unions.
for (const type of ["null", "boolean", "integer", "number", "string", "array", "object",
                    ["string", "null"], ["integer", "boolean"], ["number", "string"],
                    ["array", "object"], ["null", "integer", "array"]]) {
  add(`type ${JSON.stringify(type)}`, { type }, scalars);
}
add("empty schema", {}, scalars);
add("true schema", true, scalars);

// 2. String lengths (counted in codepoints; an escape is one character).
const strings = ["", "a", "ab", "abc", "abcd", "abcde", "abcdef", "é", "😀😀", "\n\t", "a\"b",
                 "\u00e9\u00e9\u00e9", 5, null];
for (const [lo, hi] of [[0, 0], [1, null], [null, 3], [2, 4], [3, 3], [5, null], [0, 1]]) {
  const schema = { type: "string" };
  if (lo !== null) schema.minLength = lo;
  if (hi !== null) schema.maxLength = hi;
  add(`string length ${lo}..${hi}`, schema, strings);
}

// 3. Formats.
add("format date", { type: "string", format: "date" },
    ["2024-01-31", "2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2023-04-31",
     "2023-04-30", "2023-13-01", "2023-00-10", "2023-1-10", "20230110", "2023-12-00", "0000-02-29",
     "2023-06-15T00:00:00Z", "", 20230110]);
add("format time", { type: "string", format: "time" },
    ["12:34:56Z", "23:59:59+01:00", "00:00:00.123z", "24:00:00Z", "12:60:00Z", "12:34:56",
     "12:34:56+2400", "12:34:56-0530", "1:2:3Z", "12:34:56.Z", "12:34:56+05"]);
add("format date-time", { type: "string", format: "date-time" },
    ["2024-05-06T07:08:09Z", "2024-05-06t07:08:09.5+02:00", "2024-05-06 07:08:09Z",
     "2024-05-06T07:08:09", "2024-02-30T00:00:00Z", "2024-05-06T25:00:00Z", "2024-05-06",
     "2024-05-06TT07:08:09Z"]);
add("format uuid", { type: "string", format: "uuid" },
    ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
     "urn:uuid:123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000",
     "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000", ""]);
add("date in an object", { type: "object", properties: { when: { type: "string", format: "date" } },
                           required: ["when"], additionalProperties: false },
    [{ when: "2024-03-01" }, { when: "2024-3-1" }, {}, { when: 1 }]);

// 4. enum and const.
add("enum strings", { enum: ["red", "green", "blue"] }, ["red", "green", "blue", "Red", "", 1, null]);
add("enum mixed", { enum: [1, "a", null, true, { k: [1] }, [1, 2]] },
    [1, "a", null, true, false, { k: [1] }, { k: [2] }, [1, 2], [2, 1], 2, "b"]);
add("const string", { const: "fixed" }, ["fixed", "fixe", "fixedd", null]);
add("const object", { const: { a: 1, b: [true, null] } },
    [{ a: 1, b: [true, null] }, { a: 1, b: [true] }, { a: 2, b: [true, null] }, {}]);
add("enum with type", { type: "string", enum: ["x", 1, "y"] }, ["x", "y", 1, "z"]);
add("const integer", { type: "integer", const: 42 }, [42, 43, -42, "42"]);
add("enum in properties", { type: "object", properties: { size: { enum: ["S", "M", "L"] },
                                                          qty: { const: 1 } },
                            required: ["size"], additionalProperties: false },
    [{ size: "S" }, { size: "M", qty: 1 }, { size: "XL" }, { size: "L", qty: 2 }, { qty: 1 }]);

// 5. Objects: every subset of required properties of three, with each additionalProperties.
const props = { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array", items: { type: "string" } } };
const names = Object.keys(props);
const good = { name: "Ann", age: 31, tags: ["a", "b"] };
const bad = { name: 7, age: "31", tags: [1] };
const objectInstances = [];
for (let mask = 0; mask < 8; ++mask) {
  const o = {};
  names.forEach((n, i) => { if (mask & (1 << i)) o[n] = good[n]; });
  objectInstances.push(o);
}
objectInstances.push({ name: bad.name, age: 1 }, { name: "x", age: bad.age }, { tags: bad.tags },
                     { name: "x", extra: 1 }, { name: "x", age: 2, tags: [], extra: "e", more: null },
                     { extra: true }, [], "name");
for (let req = 0; req < 8; ++req) {
  const required = names.filter((_, i) => req & (1 << i));
  for (const additional of [undefined, false, { type: "integer" }]) {
    const schema = { type: "object", properties: props, required };
    if (additional !== undefined) schema.additionalProperties = additional;
    add(`object required [${required}] additional ${JSON.stringify(additional)}`, schema, objectInstances);
  }
}
add("object no properties", { type: "object" }, [{}, { a: 1 }, { a: { b: [] } }, [], 1]);
add("object only additional", { type: "object", additionalProperties: { type: "boolean" } },
    [{}, { a: true }, { a: true, b: false }, { a: 1 }]);
add("object empty closed", { type: "object", additionalProperties: false }, [{}, { a: 1 }]);
add("properties without type", { properties: { a: { type: "integer" } }, required: ["a"] },
    [{ a: 1 }, { a: "1" }, {}, 5, "s", null, [1]]);
add("unicode property names", { type: "object", properties: { "é k": { type: "null" }, 'q"t': { type: "boolean" } },
                                additionalProperties: false },
    [{ "é k": null }, { 'q"t': true }, { "é k": null, 'q"t': false }, { "e k": null }]);
add("additional keys other than declared ones", { type: "object", properties: { na: { type: "integer" }, name: { type: "integer" }, 'q"t': { type: "boolean" }, "é k": { type: "null" } },
                                                 additionalProperties: { type: "string" } },
    [{}, { na: 1 }, { name: 1 }, { na: 1, name: 2 }, { nam: "x" }, { nam: 1 }, { na: "x" }, { name: "x" }, { n: "x" },
     { names: "x" }, { 'q"t': true }, { 'q"t': "x" }, { 'q"u': "x" }, { "é k": null }, { "é k": "x" }, { "é l": "x" }, { "": "x" }]);

// 6. Arrays.
const arrays = [[], [1], [1, 2], [1, 2, 3], [1, 2, 3, 4], ["a"], [1, "a"], [[1]], [null], {}];
for (const items of [undefined, { type: "integer" }, { type: ["integer", "string"] }]) {
  for (const [lo, hi] of [[null, null], [1, null], [null, 2], [2, 3], [0, 0], [3, 3]]) {
    const schema = { type: "array" };
    if (items) schema.items = items;
    if (lo !== null) schema.minItems = lo;
    if (hi !== null) schema.maxItems = hi;
    add(`array items ${JSON.stringify(items)} ${lo}..${hi}`, schema, arrays);
  }
}
const tuples = [[], ["a"], ["a", 1], ["a", 1, true], ["a", 1, true, false], [1, "a"], ["a", "b"],
                ["a", 1, 2]];
for (const items of [undefined, false, { type: "boolean" }]) {
  for (const [lo, hi] of [[null, null], [2, null], [null, 1], [1, 3]]) {
    const schema = { type: "array", prefixItems: [{ type: "string" }, { type: "integer" }] };
    if (items !== undefined) schema.items = items;
    if (lo !== null) schema.minItems = lo;
    if (hi !== null) schema.maxItems = hi;
    add(`tuple items ${JSON.stringify(items)} ${lo}..${hi}`, schema, tuples);
  }
}

// 7. Nesting, anyOf, allOf, $ref.
add("nested objects", {
  type: "object",
  properties: {
    user: { type: "object", properties: { id: { type: "integer" }, email: { type: "string" } },
            required: ["id"], additionalProperties: false },
    items: { type: "array", items: { type: "object", properties: { sku: { type: "string" }, n: { type: "integer" } },
                                     required: ["sku", "n"], additionalProperties: false }, minItems: 1 },
  },
  required: ["user", "items"], additionalProperties: false,
}, [{ user: { id: 1 }, items: [{ sku: "a", n: 2 }] },
    { user: { id: 1, email: "x@y" }, items: [{ sku: "a", n: 2 }, { sku: "b", n: 0 }] },
    { user: { id: 1 }, items: [] }, { user: { email: "x" }, items: [{ sku: "a", n: 2 }] },
    { user: { id: 1 }, items: [{ sku: "a" }] }, { user: { id: 1, x: 1 }, items: [{ sku: "a", n: 2 }] }]);
add("anyOf scalars", { anyOf: [{ type: "integer" }, { type: "string", maxLength: 2 }, { const: null }] },
    [1, "ab", "abc", null, true, 2.5]);
add("anyOf objects", { anyOf: [
  { type: "object", properties: { kind: { const: "circle" }, r: { type: "number" } }, required: ["kind", "r"], additionalProperties: false },
  { type: "object", properties: { kind: { const: "rect" }, w: { type: "number" }, h: { type: "number" } }, required: ["kind", "w", "h"], additionalProperties: false },
] }, [{ kind: "circle", r: 1.5 }, { kind: "rect", w: 1, h: 2 }, { kind: "rect", w: 1 },
      { kind: "circle", w: 1, h: 2 }, { kind: "tri" }]);
add("anyOf nullable array", { type: "object", properties: { v: { anyOf: [{ type: "array", items: { type: "integer" } }, { type: "null" }] } },
                              additionalProperties: false },
    [{}, { v: null }, { v: [1, 2] }, { v: ["1"] }, { v: 1 }]);
add("allOf one", { allOf: [{ type: "object", properties: { a: { type: "boolean" } }, required: ["a"], additionalProperties: false }] },
    [{ a: true }, { a: 1 }, {}, { a: false, b: 1 }]);
add("allOf one string", { allOf: [{ type: "string", minLength: 2 }] }, ["ab", "a", 1]);
add("ref defs", { $defs: { point: { type: "object", properties: { x: { type: "integer" }, y: { type: "integer" } }, required: ["x", "y"], additionalProperties: false } },
                  type: "array", items: { $ref: "#/$defs/point" } },
    [[], [{ x: 1, y: 2 }], [{ x: 1, y: 2 }, { x: -1, y: 0 }], [{ x: 1 }], [{ x: 1, y: 2.5 }]]);
add("ref definitions", { definitions: { name: { type: "string", minLength: 1 } },
                         type: "object", properties: { first: { $ref: "#/definitions/name" }, last: { $ref: "#/definitions/name" } },
                         required: ["first"], additionalProperties: false },
    [{ first: "A" }, { first: "A", last: "B" }, { first: "" }, { last: "B" }]);
add("ref recursive tree", { $defs: { node: { type: "object", properties: { value: { type: "integer" }, children: { type: "array", items: { $ref: "#/$defs/node" } } },
                                           required: ["value"], additionalProperties: false } },
                            $ref: "#/$defs/node" },
    [{ value: 1 }, { value: 1, children: [] }, { value: 1, children: [{ value: 2, children: [{ value: 3 }] }] },
     { value: 1, children: [{ children: [] }] }, { value: "1" }]);
add("ref linked list", { $defs: { list: { anyOf: [{ type: "null" }, { type: "object", properties: { head: { type: "string" }, tail: { $ref: "#/$defs/list" } }, required: ["head", "tail"], additionalProperties: false }] } },
                         $ref: "#/$defs/list" },
    [null, { head: "a", tail: null }, { head: "a", tail: { head: "b", tail: null } }, { head: "a" }, { head: "a", tail: { head: 1, tail: null } }]);

// 8. Tool-call style schemas.
add("tool get_weather", { type: "object", properties: { location: { type: "string", description: "City" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
                          required: ["location"], additionalProperties: false },
    [{ location: "Paris" }, { location: "Paris", unit: "celsius" }, { location: "Paris", unit: "kelvin" }, { unit: "celsius" }, { location: 1 }]);
add("tool search", { type: "object", properties: { query: { type: "string", minLength: 1 }, limit: { type: "integer" }, filters: { type: "array", items: { type: "string" }, maxItems: 3 } },
                     required: ["query"], additionalProperties: false },
    [{ query: "q" }, { query: "q", limit: 5 }, { query: "q", filters: ["a", "b", "c"] }, { query: "q", filters: ["a", "b", "c", "d"] },
     { query: "" }, { query: "q", limit: 1.5 }]);
add("tool create_event", { type: "object", properties: { title: { type: "string" }, start: { type: "string", format: "date-time" }, attendees: { type: "array", items: { type: "string" } }, all_day: { type: "boolean" } },
                           required: ["title", "start"], additionalProperties: false },
    [{ title: "t", start: "2025-01-02T03:04:05Z" }, { title: "t", start: "2025-01-02T03:04:05Z", attendees: [], all_day: false },
     { title: "t", start: "tomorrow" }, { title: "t" }]);
add("openai strict style", { type: "object", properties: { answer: { type: "string" }, confidence: { type: "number" }, sources: { type: ["array", "null"], items: { type: "string" } } },
                             required: ["answer", "confidence", "sources"], additionalProperties: false },
    [{ answer: "a", confidence: 0.5, sources: null }, { answer: "a", confidence: 1, sources: ["s"] }, { answer: "a", confidence: 0.5 }, { answer: "a", confidence: "high", sources: null }]);
add("person", { type: "object", properties: { name: { type: "string" }, birthday: { type: "string", format: "date" }, id: { type: "string", format: "uuid" }, address: { type: "object", properties: { street: { type: "string" }, zip: { type: "string", minLength: 5, maxLength: 5 } }, required: ["zip"] } },
                required: ["name"] },
    [{ name: "A" }, { name: "A", birthday: "1990-07-04", id: "123e4567-e89b-12d3-a456-426614174000", address: { zip: "12345" } },
     { name: "A", address: { zip: "1234" } }, { name: "A", address: { street: "s", zip: "12345", extra: 1 } }, { name: "A", birthday: "1990-07-32" }]);

// 9. Whitespace: each value pretty-printed (indent 2, a tab, CRLF lines), with a space around
// every structural character inside the value, and malformed texts (whitespace inside literals
// and numbers, between two values, JSON-foreign whitespace such as \f). Whitespace before or
// after the whole value is refused by the grammar by design (tests/grammar/json_schema_test.cpp).
const addText = (name, schema, texts) => corpus.push({ name, schema, instances: texts });
// A space (or a tab/newline mix) before and after every structural character outside strings.
const spaced = (v, ws = " ") => {
  const text = JSON.stringify(v);
  let out = "", inString = false;
  for (let i = 0; i < text.length; ++i) {
    const c = text[i];
    if (inString) {
      out += c;
      if (c === "\\") out += text[++i];
      else if (c === '"') inString = false;
    } else if (c === '"') {
      out += c;
      inString = true;
    } else if ("{}[]:,".includes(c)) {
      out += (i > 0 ? ws : "") + c + (i < text.length - 1 ? ws : "");
    } else {
      out += c;
    }
  }
  return out;
};
const forms = (v) => [JSON.stringify(v, null, 2), JSON.stringify(v, null, "\t"),
                      JSON.stringify(v, null, 4).replaceAll("\n", "\r\n"), spaced(v), spaced(v, " \r\n\t ")];
const spacedCases = [
  ["object", { type: "object", properties: { a: { type: "integer" }, b: { type: "array", items: { type: "integer" } }, c: { type: "object" } },
               required: ["a"], additionalProperties: false },
   [{ a: 1, b: [1, 2], c: { x: [true, null], y: "s p" } }, { a: 1 }, { a: 1, b: [] , c: {} }, { a: "1", b: [1] }, { b: [1] }]],
  ["additional properties", { type: "object", properties: { id: { type: "integer" } }, additionalProperties: { type: "string" } },
   [{ id: 1, x: "a", y: "b" }, { x: "a" }, { id: 1, x: 2 }]],
  ["prefix items", { type: "array", prefixItems: [{ type: "string" }, { type: "integer" }], items: { type: "boolean" }, maxItems: 4 },
   [["a", 1], ["a", 1, true, false], ["a"], [], ["a", 1, true, false, true], [1, "a"]]],
  ["min items", { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 3 }, [[1, 2], [1, 2, 3], [1], [1, 2, 3, 4]]],
  ["enum and const objects", { anyOf: [{ const: { k: [1, 2], m: {} } }, { enum: [[], [1, [2]], "x"] }] },
   [{ k: [1, 2], m: {} }, [], [1, [2]], { k: [1], m: {} }, [1, 2]]],
  ["ref tree", { $defs: { node: { type: "object", properties: { value: { type: "integer" }, children: { type: "array", items: { $ref: "#/$defs/node" } } },
                                  required: ["value"], additionalProperties: false } }, $ref: "#/$defs/node" },
   [{ value: 1, children: [{ value: 2, children: [{ value: 3 }] }, { value: 4 }] }, { value: 1, children: [{ children: [] }] }]],
  ["any object", { type: "object" }, [{ a: [1, { b: null }], c: "é", d: -1.5e3, e: {} }, {}, [1]]],
  ["tool call", { type: "object", properties: { name: { const: "get_weather" }, arguments: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"], additionalProperties: false } },
                  required: ["name", "arguments"], additionalProperties: false },
   [{ name: "get_weather", arguments: { city: "Oslo", days: 3 } }, { name: "get_weather", arguments: {} }, { name: "other", arguments: { city: "Oslo" } }]],
];
for (const [name, schema, values] of spacedCases) addText(`whitespace: ${name}`, schema, values.flatMap(forms));
addText("whitespace: malformed", {},
        ["tr ue", "nu ll", "fal se", "1 2", "- 1", "1 .5", "1. 5", "1e 5", "1 e5", '"a" "b"', "[1 2]", '{"a" 1}',
         '{"a":1 "b":2}', "[ , 1]", "[1 , ]", "{ , }", "[1]\f", "[\f1]", "[1,\v2]", "{\u00a0}", "[\u20281]",
         "[ 1 ]", '{ "a" : [ true , null ] }', "[\n\t 1\r\n]"]);

writeFileSync(join(here, "corpus.json"), JSON.stringify(corpus, null, 1) + "\n");
console.log(`corpus.json: ${corpus.length} schemas, ${corpus.reduce((n, c) => n + c.instances.length, 0)} instances`);
