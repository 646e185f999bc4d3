// Unit tests of the Jinja interpreter. The table's expected outputs were produced by jinja2 3.1.6
// in transformers' environment (tools/fixtures/render_chat_templates.py --jinja-only's setup).
#include "strata/tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/core/error.h"
#include "strata/tokenizer/chat_template.h"

namespace {

using nlohmann::ordered_json;
using strata::jinja::Limits;
using strata::jinja::Template;

std::string render(const std::string& tmpl, const std::string& ctx = "{}",
                   const Limits& limits = {}) {
  return Template::compile(tmpl, limits).render(ordered_json::parse(ctx));
}

// The error message of compiling and rendering tmpl, or "" when it succeeds.
std::string error_of(const std::string& tmpl, const std::string& ctx = "{}",
                     const Limits& limits = {}) {
  try {
    render(tmpl, ctx, limits);
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "";
}

struct Case {
  const char* name;
  const char* tmpl;
  const char* context;
  const char* want;
};

const Case kCases[] = {
    {"for_loop_vars",
     "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revin"
     "dex0 }}/{{ loop.length }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}", "1/0/3/2/3:a,2/1/2/1/3:b,3/2/1/0/3:c"},
    {"for_first_last",
     "{% for x in xs %}{% if loop.first %}[{% endif %}{{ x }}{% if loop.last %}]{% endif %}"
     "{% endfor %}",
     "{\"xs\": [1, 2, 3]}", "[123]"},
    {"for_prev_next",
     "{% for x in xs %}{{ loop.previtem is defined }}-{{ loop.previtem }}-{{ loop.nextitem "
     "}};{% endfor %}",
     "{\"xs\": [1, 2, 3]}", "False--2;True-1-3;True-2-;"},
    {"for_else",
     "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}|{% for x in ys %}{{ x }}{% else %"
     "}empty{% endfor %}",
     "{\"xs\": [], \"ys\": [1]}", "empty|1"},
    {"for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2, \"c\": [1, 2]}}", "b=1;a=2;c=[1, 2];"},
    {"for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"z\": 1, \"y\": 2}}", "zy"},
    {"for_inline_if",
     "{% for x in xs if x % 2 == 0 %}{{ x }}@{{ loop.index }}/{{ loop.length }} {% endfor %"
     "}",
     "{\"xs\": [1, 2, 3, 4, 5, 6]}", "2@1/3 4@2/3 6@3/3 "},
    {"for_string", "{% for c in 'héllo' %}{{ c }}.{% endfor %}", "{}", "h.é.l.l.o."},
    {"for_break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% bre"
     "ak %}{% endif %}{{ x }}{% endfor %}",
     "{}", "0134"},
    {"for_nested_loop",
     "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ "
     "loop.index }} {% endfor %}",
     "{}", "1x11y21 2x12y22 "},
    {"loop_cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}", "{}",
     "odd even odd even odd "},
    {"if_elif_else",
     "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif "
     "%} {% endfor %}",
     "{}", "one two many "},
    {"set_scoping",
     "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", "{}",
     "123|1"},
    {"set_in_if_visible", "{% if true %}{% set y = 'in' %}{% endif %}{{ y }}", "{}", "in"},
    {"namespace_set",
     "{% set ns = namespace(total=0, seen=[]) %}{% for i in range(4) %}{% set ns.total = ns"
     ".total + i %}{% endfor %}{{ ns.total }}",
     "{}", "6"},
    {"namespace_from_dict",
     "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}{{ ns.c is de"
     "fined }}",
     "{}", "121False"},
    {"set_block",
     "{% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting }}]{% set up | upper %}sh"
     "out{% endset %}{{ up }}",
     "{\"name\": \"Ann\"}", "[Hello Ann!]SHOUT"},
    {"set_tuple", "{% set a, b = 1, 2 %}{{ a }}-{{ b }}{% set c, d = 'xy' %}{{ c }}{{ d }}", "{}",
     "1-2xy"},
    {"macro_defaults",
     "{% macro greet(name, greeting='Hi', punct='!') %}{{ greeting }} {{ name }}{{ punct }}"
     "{% endmacro %}{{ greet('A') }}|{{ greet('B', 'Yo') }}|{{ greet('C', punct='?') }}|{{ "
     "greet(name='D') }}",
     "{}", "Hi A!|Yo B!|Hi C?|Hi D!"},
    {"macro_missing_arg",
     "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}", "{}",
     "[1][][False]"},
    {"macro_recursive",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% e"
     "ndmacro %}{{ fact(5) }}",
     "{}", "120"},
    {"macro_varargs_kwargs",
     "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", "{}",
     "1|(2, 3)|{'x': 4}"},
    {"macro_closure",
     "{% set counter = namespace(n=0) %}{% macro bump() %}{% set counter.n = counter.n + 1 "
     "%}{{ counter.n }}{% endmacro %}{{ bump() }}{{ bump() }}{{ counter.n }}",
     "{}", "122"},
    {"macro_sees_later_globals",
     "{% macro show() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ show() }}", "{}", "L"},
    {"macro_trim_filter", "{% macro m() %}\n  body  \n{% endmacro %}[{{ m()|trim }}]", "{}",
     "[body]"},
    {"ws_dash", "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- 'd' -}}  \n e", "{}", "abcde"},
    {"ws_trim_lstrip", "<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>",
     "{\"xs\": [1, 2]}", "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
    {"ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc", "{}", "a\n  b\nc"},
    {"ws_comment", "a\n  {# comment #}\nb {#- c -#} d", "{}", "a\nbd"},
    {"ws_var_not_lstripped", "x\n    {{ 'v' }}\n  {% if true %}y{% endif %}", "{}", "x\n    v\ny"},
    {"generation_tag",
     "{% for m in msgs %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}",
     "{\"msgs\": [\"a\", \"b\"]}", "<a><b>"},
    {"raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", "{}",
     "{{ not evaluated }} {% if %}!"},
    {"string_escapes",
     "{{ 'a\\tb\\nc\\\\d\\'e\"f' }}|{{ \"q'\\\"\" }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ 'x'"
     " 'y' \"z\" }}",
     "{}", "a\tb\nc\\d'e\"f|q'\"|Aé😀|xyz"},
    {"numbers",
     "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ "
     "7 / 2 }} {{ 1.5 + 1 }} {{ 1_000 }} {{ 0x1f }} {{ 1e3 }} {{ 10 / 4 }} {{ 2 ** -1 }}",
     "{}", "7 3 -4 1 2 1024 3.5 2.5 1000 31 1000.0 2.5 0.5"},
    {"float_repr",
     "{{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1234567"
     "89.125 }} {{ -2.5e-10 }} {{ 3.0 * 2 }}",
     "{}",
     "0.30000000000000004 1.0 1e+16 1000000000000000.0 0.0001 1e-05 123456789.125 -2.5e-10 "
     "6.0"},
    {"literals_repr",
     "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1, (2, 3)]} }} {{ (1,) }} {{ () }"
     "} {{ none }} {{ True }} {{ \"it's\" }} {{ ['it\\'s', 'q\"'] }}",
     "{}",
     "[1, 'a', None, True, 2.5] {'k': 'v', 'n': [1, (2, 3)]} (1,) () None True it's [\"it's"
     "\", 'q\"']"},
    {"input_repr", "{{ d }} {{ l }}",
     "{\"d\": {\"a\": null, \"b\": true, \"c\": 1.0, \"u\": \"é\\n\"}, \"l\": [1, \"two\", "
     "{\"x\": []}]}",
     "{'a': None, 'b': True, 'c': 1.0, 'u': 'é\\n'} [1, 'two', {'x': []}]"},
    {"concat_tilde", "{{ 'a' ~ 1 ~ none ~ undefined_var ~ [1] }}", "{}", "a1None[1]"},
    {"attr_subscript",
     "{{ d.a }} {{ d['a'] }} {{ d.l[1] }} {{ d.l[-1] }} {{ d['l'][0] }} {{ d.missing is def"
     "ined }} {{ l.0 }}",
     "{\"d\": {\"a\": \"A\", \"l\": [10, 20, 30]}, \"l\": [\"z\"]}", "A A 20 30 10 False z"},
    {"slicing",
     "{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ s[::-1] }} {{ s[1:3] }} {{ s[-"
     "2:] }} {{ l[5:] }}",
     "{\"l\": [1, 2, 3, 4], \"s\": \"héllo\"}",
     "[4, 3, 2, 1] [2, 3, 4] [1, 2, 3] [1, 3] olléh él lo []"},
    {"comparisons",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }}"
     " {{ 'a' != 'b' }} {{ 1 == '1' }} {{ none == none }}",
     "{}", "True False True True True True False True"},
    {"in_not_in",
     "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in 'abc' }}"
     " {{ 3 not in [3] }} {{ 'a' in missing }}",
     "{}", "True True True True False False"},
    {"and_or_not",
     "{{ 0 or 'x' }} {{ 1 and 2 }} {{ 0 and 1 }} {{ none or none }} {{ not 0 }} {{ not [] }"
     "} {{ '' or [] or 5 }}",
     "{}", "x 2 0 None True True 5"},
    {"tests_types",
     "{{ 'a' is string }} {{ 1 is number }} {{ true is number }} {{ 1.5 is float }} {{ 1 is"
     " integer }} {{ true is integer }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is it"
     "erable }} {{ 'x' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ {} is seq"
     "uence }} {{ none is none }} {{ x is undefined }} {{ x is iterable }} {{ x is sequence"
     " }}",
     "{}",
     "True True True True True False True False True True False True True True True True Tr"
     "ue"},
    {"tests_values",
     "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 6 is divi"
     "sibleby 3 }} {{ 6 is divisibleby(4) }} {{ 3 is odd }} {{ 4 is even }} {{ 2 is in [1, "
     "2] }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ none"
     " is sameas none }} {{ 'upper' is filter }} {{ 'nope' is test }}",
     "{}", "True False True False True False True True True True True True True True True False"},
    {"is_not",
     "{{ x is not defined }} {{ none is not none }} {{ 'a' is not string }} {{ not x is def"
     "ined }}",
     "{}", "True False False True"},
    {"condexpr",
     "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 1 if 0"
     " else 2 if 0 else 3 }}",
     "{}", "y n [] 3"},
    {"filter_precedence",
     "{{ -3|abs }} {{ 'a'|upper if true else 'b' }} {{ [1,2]|length + 1 }} {{ 'x' ~ 'y'|upp"
     "er }}",
     "{}", "3 A 3 xY"},
    {"tojson",
     "{{ d|tojson }}\n{{ d|tojson(indent=2) }}\n{{ d|tojson(separators=(',', ':')) }}\n{{ d"
     "|tojson(sort_keys=true) }}\n{{ 'é\"<>&'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }}"
     " {{ [1.0, 2.5e-8, none, true]|tojson }} {{ []|tojson(indent=2) }} {{ {}|tojson(indent"
     "=1) }}",
     "{\"d\": {\"z\": [1, {\"y\": \"é\"}], \"a\": null, \"f\": 0.5}}",
     "{\"z\": [1, {\"y\": \"é\"}], \"a\": null, \"f\": 0.5}\n{\n  \"z\": [\n    1,\n    {\n"
     "      \"y\": \"é\"\n    }\n  ],\n  \"a\": null,\n  \"f\": 0.5\n}\n{\"z\":[1,{\"y\":\""
     "é\"}],\"a\":null,\"f\":0.5}\n{\"a\": null, \"f\": 0.5, \"z\": [1, {\"y\": \"é\"}]}\n"
     "\"é\\\"<>&\" \"\\u00e9\" [1.0, 2.5e-08, null, true] [] {}"},
    {"tojson_indent_string", "{{ d|tojson(indent='\\t') }}", "{\"d\": {\"a\": [1, 2]}}",
     "{\n\t\"a\": [\n\t\t1,\n\t\t2\n\t]\n}"},
    {"filters_strings",
     "{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello'|upper }}|{{ 'Hello'|lower }}|{"
     "{ 'a-b'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'hello world'|title "
     "}}|{{ 'hELLO'|capitalize }}|{{ 'a b  c'|wordcount }}|{{ 42|string }}|{{ none|string }"
     "}",
     "{}", "x|hi|HELLO|hello|a+b|bba|Hello World|Hello|3|42|None"},
    {"filters_default",
     "{{ x|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ 0|d('z', bo"
     "olean=true) }}|{{ none|default('n') }}|{{ x|default }}",
     "{}", "d||d|z|None|"},
    {"filters_seq",
     "{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ []|first is defined }"
     "} {{ [1, 2]|join('-') }} {{ ['a', 'b']|join }} {{ 'abc'|list }} {{ {'a': 1}|list }} {"
     "{ [1, 2, 3]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ x|length }}",
     "{}", "3 2 a False 1-2 ab ['a', 'b', 'c'] ['a'] 3 5 1 0"},
    {"filters_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ x|items|list }}",
     "{\"d\": {\"b\": 2, \"a\": 1}}", "b:2 a:1 []"},
    {"filters_numbers",
     "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 4.9|int }} {{ '0x1A'"
     "|int(0, 16) }} {{ '2.5'|float }} {{ 3|float }} {{ -2|abs }} {{ 2.567|round(2) }} {{ 2"
     ".5|round }} {{ 2.1|round(0, 'ceil') }} {{ [1, 2, 3]|sum }} {{ [3, 1]|min }} {{ [3, 1]"
     "|max }}",
     "{}", "42 4 0 7 4 26 2.5 3.0 2 2.57 2.0 3.0 6 1 3"},
    {"filters_attr_based",
     "{{ users|selectattr('active')|map(attribute='name')|join(',') }} {{ users|rejectattr("
     "'active')|map(attribute='name')|list }} {{ users|selectattr('role', 'equalto', 'admin"
     "')|list|length }} {{ users|map(attribute='nick', default='-')|list }} {{ users|sort(a"
     "ttribute='name')|map(attribute='name')|join }} {{ users|sum(attribute='age') }}",
     "{\"users\": [{\"name\": \"bo\", \"active\": true, \"role\": \"admin\", \"age\": 3}, {"
     "\"name\": \"al\", \"active\": false, \"role\": \"user\", \"age\": 4}]}",
     "bo ['al'] 1 ['-', '-'] albo 7"},
    {"filters_select_map",
     "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', "
     "'B']|map('upper')|list }} {{ [0, 1, '', 'x']|select|list }} {{ ['b', 'A', 'c']|sort }"
     "} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} "
     "{{ ['a', 'A', 'b']|unique|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ [1, 2]|reverse|l"
     "ist }} {{ 'abc'|reverse }}",
     "{}",
     "[1, 3] [2, 4] ['A', 'B'] [1, 'x'] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] ['a', 'b'"
     "] [('a', 2), ('b', 1)] [2, 1] cba"},
    {"filters_misc",
     "{{ '<b>&'|e }} {{ '<b>'|escape }} {{ '<i>'|safe }} {{ '%s-%d'|format('a', 3) }} {{ 'l"
     "ine1\\nline2\\n\\nline4'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }} {{ [1, 2, 3, 4, 5"
     "]|batch(2)|list }} {{ 'ab'|center(6) }}|",
     "{}",
     "&lt;b&gt;&amp; &lt;b&gt; <i> a-3 line1\n  line2\n\n  line4|  x\n  y [[1, 2], [3, 4], "
     "[5]]   ab  |"},
    {"str_methods",
     "{{ s.startswith('He') }} {{ s.endswith('lo') }} {{ s.startswith(('x', 'H')) }} {{ '  "
     "a  '.strip() }}| {{ 'xxa'.lstrip('x') }} {{ 'axx'.rstrip('x') }} {{ 'a,b,,c'.split(',"
     "') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"
     " {{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }"
     "} {{ s.find('l') }} {{ s.rfind('l') }} {{ s.find('z') }} {{ s.count('l') }} {{ '-'.jo"
     "in(['a', 'b']) }} {{ 'a\\nb'.splitlines() }} {{ s.partition('l') }} {{ '12'.isdigit()"
     " }} {{ 'ab'.isalpha() }} {{ s[0] }} {{ s[-1] }}",
     "{\"s\": \"Hello\"}",
     "True True True a| a a ['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'] HeLLo "
     "HELLO hello Hello World 2 3 -1 2 a-b ['a', 'b'] ('He', 'l', 'lo') True True H o"},
    {"str_format",
     "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format("
     "name='N') }} {{ '{:>5}|{:<4}|{:^5}|'.format('a', 'b', 'c') }} {{ '{:.2f} {:05d} {:,}'"
     ".format(3.14159, 42, 1234567) }} {{ '{0[k]}'.format(d) }} {{ '{{literal}}'.format() }"
     "}",
     "{\"d\": {\"k\": \"V\"}}", "a and 1 yx N!     a|b   |  c  | 3.14 00042 1,234,567 V {literal}"},
    {"dict_methods",
     "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d."
     "get('z') }} {{ d.get('z', 'dflt') }} {{ d|length }}",
     "{\"d\": {\"a\": 1, \"b\": [2]}}", "['a', 'b'] [1, [2]] [('a', 1), ('b', [2])] 1 None dflt 2"},
    {"undefined_semantics",
     "[{{ x }}][{{ d.missing }}][{% for i in x %}{{ i }}{% endfor %}][{{ x is defined }}][{"
     "{ d.missing is defined }}][{{ x|length }}][{{ x == x }}][{{ 'a' in x }}]",
     "{\"d\": {}}", "[][][][False][False][0][True][False]"},
    {"none_attrs", "{{ n.attr is defined }} {{ n['k'] is defined }} {{ l[10] is defined }}",
     "{\"n\": null, \"l\": []}", "False False False"},
    {"with_block", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", "{}",
     "211"},
    {"filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", "{\"name\": \"bob\"}",
     "HELLO BOB"},
    {"range_dict_globals",
     "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1,"
     " b='x') }} {{ dict([('k', 1)]) }}",
     "{}", "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'} {'k': 1}"},
    {"raise_in_branch", "{% if false %}{{ raise_exception('never') }}{% endif %}ok", "{}", "ok"},
    {"markup_concat",
     "{{ ('<a>'|safe) + '<b>' }} {{ '<b>' ~ ('<a>'|safe) }} {{ ('<a>'|safe)|length }}", "{}",
     "<a>&lt;b&gt; <b><a> 3"},
    {"qwen_like_think_split",
     "{% set c = m.content %}{% if '</think>' in c %}{{ c.split('</think>')[-1].lstrip('\\n"
     "') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}{%"
     " endif %}",
     "{\"m\": {\"content\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}}", "answer|reason"},
    {"messages_reverse_index",
     "{% for m in msgs[::-1] %}{{ (msgs|length - 1) - loop.index0 }}{{ m }} {% endfor %}",
     "{\"msgs\": [\"a\", \"b\", \"c\"]}", "2c 1b 0a "},
    {"unicode_methods",
     "{{ 'ÄÖü'|lower }} {{ 'straße'|upper }} {{ '日本語'|length }} {{ '日本語'[1] }} {{ '  日本  '|"
     "trim }}|",
     "{}", "äöü STRASSE 3 本 日本|"},
};

TEST(Jinja, FeatureTableMatchesJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::string got;
    try {
      got = render(c.tmpl, c.context);
    } catch (const strata::Error& e) {
      ADD_FAILURE() << "error: " << e.what();
      continue;
    }
    EXPECT_EQ(got, c.want);
  }
}

TEST(Jinja, RaiseExceptionCarriesTheMessage) {
  try {
    render("line one\n{% if x %}{{ raise_exception('Bad role: ' ~ x) }}{% endif %}",
           R"({"x": "robot"})");
    FAIL() << "no exception";
  } catch (const strata::jinja::RaisedError& e) {
    EXPECT_STREQ(e.what(), "Bad role: robot");
  }
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("a\nb\n  {% include 'x.j2' %}"),
            "chat template line 3, column 6: the 'include' tag is not supported by strata's chat "
            "templates");
  EXPECT_EQ(error_of("{% frobnicate %}"),
            "chat template line 1, column 4: Encountered unknown tag 'frobnicate'.");
  EXPECT_EQ(error_of("{{ 1 + }}"),
            "chat template line 1, column 8: unexpected 'end of print statement'");
  EXPECT_EQ(error_of("x {{ a $ b }}"), "chat template line 1, column 8: unexpected char '$'");
  EXPECT_EQ(error_of("{% for x in y %}\n{% if x %}\n{% endfor %}"),
            "chat template line 3, column 4: Encountered unknown tag 'endfor'. Jinja was looking "
            "for the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs "
            "to be closed is 'if'.");
  EXPECT_EQ(error_of("{% macro m() %}{% call m() %}{% endcall %}{% endmacro %}"),
            "chat template line 1, column 19: the 'call' tag is not supported by strata's chat "
            "templates");
  EXPECT_EQ(error_of("{{ 'abc }}"), "chat template line 1, column 4: unexpected char '''");
  EXPECT_EQ(error_of("{{ x )}}"), "chat template line 1, column 6: unexpected ')'");
  EXPECT_EQ(error_of("{% for x in y recursive %}{% endfor %}"),
            "chat template line 1, column 15: recursive loops are not supported");
  EXPECT_EQ(error_of("{% set 1 = 2 %}"), "chat template line 1, column 8: can't assign to 'const'");
  EXPECT_EQ(error_of("{% break %}"),
            "chat template line 1, column 4: 'break' is not inside a loop");
  EXPECT_EQ(error_of("{# never closed"),
            "chat template line 1, column 1: Missing end of comment tag");
  EXPECT_EQ(error_of("{{ x|groupby('a') }}"),
            "chat template line 1, column 6: the 'groupby' filter is not supported by strata's "
            "chat templates");
  EXPECT_NE(error_of(std::string("{{ '\xff' }}")).find("not valid UTF-8"), std::string::npos);
}

TEST(Jinja, UnclosedBlocksNameTheOpeningLine) {
  EXPECT_EQ(error_of("hello\n{% for m in messages %}\n{{ m }}\n"),
            "chat template line 3, column 8: unexpected end of template: the 'for' block opened "
            "at line 2 is never closed (expected 'endfor' or 'else')");
  EXPECT_EQ(error_of("{% if a %}x{% elif b %}y"),
            "chat template line 1, column 25: unexpected end of template: the 'if' block opened "
            "at line 1 is never closed (expected 'elif' or 'else' or 'endif')");
  EXPECT_EQ(error_of("{% macro m() %}"),
            "chat template line 1, column 16: unexpected end of template: the 'macro' block "
            "opened at line 1 is never closed (expected 'endmacro')");
  EXPECT_EQ(error_of("{{ x "),
            "chat template line 1, column 1: unexpected end of template, expected 'end of print "
            "statement'");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("ok\n{{ missing.attr }}"),
            "chat template line 2, column 11: UndefinedError: 'missing' is undefined");
  EXPECT_EQ(error_of("{% for m in messages %}\n  {{ '<' + m.content }}{% endfor %}",
                     R"({"messages": [{"role": "user"}]})"),
            "chat template line 2, column 10: UndefinedError: 'dict object' has no attribute "
            "'content'");
  EXPECT_EQ(error_of("\n\n{{ 'a' + 1 }}"),
            "chat template line 3, column 8: TypeError: can only concatenate str (not \"int\") "
            "to str");
  EXPECT_EQ(error_of("{{ d.pop('a') }}", R"({"d": {"a": 1}})"),
            "chat template line 1, column 9: SecurityError: access to attribute 'pop' of 'dict' "
            "object is unsafe.");
  EXPECT_EQ(
      error_of("{{ 1 // 0 }}"),
      "chat template line 1, column 6: ZeroDivisionError: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ range(200000)|length }}"),
            "chat template line 1, column 9: OverflowError: Range too big. The sandbox blocks "
            "ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(error_of("{% for a, b in [1] %}{% endfor %}"),
            "chat template line 1, column 4: TypeError: 'int' object is not iterable");
  EXPECT_EQ(error_of("{{ x|nosuchfilter }}"),
            "chat template line 1, column 6: TemplateAssertionError: No filter named "
            "'nosuchfilter'.");
  EXPECT_EQ(error_of("{% set n = 1 %}{% set n.a = 2 %}"),
            "chat template line 1, column 19: TemplateRuntimeError: cannot assign attribute on "
            "non-namespace object");
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  Limits small;
  small.max_steps = 10000;
  small.max_string_bytes = 1 << 16;
  small.max_parse_depth = 50;
  small.max_call_depth = 20;
  EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                     "{}", small)
                .find("render step limit exceeded"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     "{}", small)
                .find("string exceeds the render limit"),
            std::string::npos);
  EXPECT_NE(
      error_of("{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}", "{}", small)
          .find("template nesting is too deep"),
      std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}", small)
                .find("RecursionError"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}", "{}", small).find("MemoryError"), std::string::npos);
}

TEST(ChatTemplate, DefaultsAndKeyOrder) {
  auto t = strata::ChatTemplate::compile(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} "
      "{{ messages[0] | tojson }}");
  ordered_json in = ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(t.render(in), "True True False {\"role\": \"user\", \"content\": \"x\"}");
  nlohmann::json plain = nlohmann::json::parse(R"({"messages": [{"z": 1, "a": 2}]})");
  EXPECT_EQ(t.render(plain), "True True False {\"a\": 2, \"z\": 1}");  // nlohmann::json sorts
}

TEST(ChatTemplate, LoadsModelFolderConfig) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "strata_chat_template_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json") << R"({
      "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
      "eos_token": "</s>", "pad_token": null,
      "chat_template": [{"name": "default", "template": "D{{ bos_token }}"},
                        {"name": "tool_use", "template": "T{{ eos_token }}"}]})";
  }
  strata::ChatTemplateConfig cfg = strata::load_chat_template_config(dir.string());
  EXPECT_EQ(cfg.special_tokens.dump(), R"({"bos_token":"<s>","eos_token":"</s>"})");
  EXPECT_EQ(cfg.select(false), "D{{ bos_token }}");
  EXPECT_EQ(cfg.select(true), "T{{ eos_token }}");
  { std::ofstream(dir / "chat_template.jinja") << "J"; }
  cfg = strata::load_chat_template_config(dir.string());
  EXPECT_EQ(cfg.select(true), "J");
#ifdef STRATA_BINARY
  {
    std::ofstream(dir / "chat_template.jinja")
        << "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
           "{{ enable_thinking }}";
  }
  {
    std::ofstream(dir / "in.json") << R"({"messages": [{"role": "user", "content": "héllo"}],
      "chat_template_kwargs": {"enable_thinking": false}})";
  }
  std::string cmd = std::string(STRATA_BINARY) + " chat-template --model " + dir.string() + " < " +
                    (dir / "in.json").string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(out, "<s>user:héllo;False");
#endif
  fs::remove_all(dir);
}

}  // namespace
