// Every conversation of tests/fixtures/chat/conversations.json rendered with every template of
// tests/fixtures/chat/templates/ must match tests/fixtures/chat/expected.json byte for byte
// (written by tools/fixtures/render_chat_templates.py with transformers' renderer).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "strata/core/error.h"
#include "strata/tokenizer/chat_template.h"

namespace {

using nlohmann::ordered_json;

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/chat/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json read_json(const std::string& path) { return ordered_json::parse(read_file(path)); }

// The inputs the fixture script passes to transformers for one conversation.
ordered_json inputs_for(const ordered_json& conv, const ordered_json& tmpl) {
  ordered_json in = ordered_json::object();
  for (const char* tok : {"bos_token", "eos_token"})
    if (tmpl.contains(tok) && !tmpl[tok].is_null()) in[tok] = tmpl[tok];
  if (conv.contains("kwargs"))
    for (const auto& [k, v] : conv["kwargs"].items()) in[k] = v;
  in["messages"] = conv["messages"];
  if (conv.contains("tools")) in["tools"] = conv["tools"];
  in["add_generation_prompt"] = conv.value("add_generation_prompt", false);
  return in;
}

std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) {
    size_t b = i > 40 ? i - 40 : 0;
    return ordered_json(s.substr(b, 80)).dump();
  };
  return "first difference at byte " + std::to_string(i) + "\n  want: " + around(want) +
         "\n  got:  " + around(got);
}

TEST(ChatTemplateFixtures, AllConversationsMatchTransformers) {
  ordered_json manifest = read_json(kDir + "templates/manifest.json");
  ordered_json convs = read_json(kDir + "conversations.json")["conversations"];
  ordered_json expected = read_json(kDir + "expected.json");
  ASSERT_GE(convs.size(), 24u);
  int cases = 0, matched = 0;
  for (const auto& tmpl : manifest["templates"]) {
    std::string name = tmpl["name"];
    SCOPED_TRACE("template " + name);
    ASSERT_TRUE(expected["templates"].contains(name)) << "expected.json lacks " << name;
    const ordered_json& want_list = expected["templates"][name];
    ASSERT_EQ(want_list.size(), convs.size());
    strata::ChatTemplate ct = strata::ChatTemplate::compile(
        read_file(kDir + "templates/" + tmpl["file"].get<std::string>()));
    for (size_t i = 0; i < convs.size(); ++i) {
      const ordered_json& want = want_list[i];
      ASSERT_EQ(want["name"], convs[i]["name"]);
      SCOPED_TRACE("conversation " + want["name"].get<std::string>());
      ++cases;
      std::string got;
      std::string error;
      bool raised = false;
      try {
        got = ct.render(inputs_for(convs[i], tmpl));
      } catch (const strata::jinja::RaisedError& e) {
        error = e.what();
        raised = true;
      } catch (const strata::Error& e) {
        error = e.what();
      }
      if (want.contains("output")) {
        std::string w = want["output"];
        EXPECT_TRUE(error.empty()) << "unexpected error: " << error;
        if (!error.empty()) continue;
        EXPECT_EQ(got, w) << first_difference(w, got);
        matched += got == w;
        continue;
      }
      std::string type = want["error"]["type"], msg = want["error"]["message"];
      EXPECT_FALSE(error.empty()) << "expected " << type << ": " << msg << "\ngot output: " << got;
      if (error.empty()) continue;
      if (type == "TemplateError") {  // raise_exception(): exactly the template's message
        EXPECT_TRUE(raised) << error;
        EXPECT_EQ(error, msg);
        matched += raised && error == msg;
      } else {
        std::string needle = type + ": " + msg;
        EXPECT_NE(error.find(needle), std::string::npos) << "want '" << needle << "' in: " << error;
        matched += error.find(needle) != std::string::npos;
      }
    }
  }
  std::cout << "[chat fixtures] " << matched << " / " << cases << " match "
            << expected["renderer"].get<std::string>() << "\n";
  EXPECT_EQ(matched, cases);
}

}  // namespace
