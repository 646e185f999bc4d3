// The reasoning parser: think blocks opened by the prompt or by the model, tags cut across
// pushes, and the same split however the text is cut.
#include "strata/server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace strata::server {
namespace {

// Feeds the chunks and concatenates the deltas.
ReasoningParser::Delta run(bool starts_in_reasoning, const std::vector<std::string>& chunks) {
  ReasoningParser p(starts_in_reasoning);
  ReasoningParser::Delta all;
  for (const std::string& chunk : chunks) {
    const ReasoningParser::Delta d = p.push(chunk);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  const ReasoningParser::Delta d = p.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

ReasoningParser::Delta run_whole(bool starts_in_reasoning, const std::string& text) {
  return run(starts_in_reasoning, {text});
}

void expect_cut_invariant(bool starts_in_reasoning, const std::string& text) {
  const ReasoningParser::Delta whole = run_whole(starts_in_reasoning, text);
  std::vector<std::string> chars;
  for (char c : text) chars.push_back(std::string(1, c));
  ReasoningParser::Delta d = run(starts_in_reasoning, chars);
  EXPECT_EQ(d.reasoning, whole.reasoning) << "1-char chunks";
  EXPECT_EQ(d.content, whole.content) << "1-char chunks";
  for (size_t i = 0; i <= text.size(); ++i) {
    d = run(starts_in_reasoning, {text.substr(0, i), text.substr(i)});
    EXPECT_EQ(d.reasoning, whole.reasoning) << "cut at " << i;
    EXPECT_EQ(d.content, whole.content) << "cut at " << i;
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 6)(rng);
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    d = run(starts_in_reasoning, chunks);
    EXPECT_EQ(d.reasoning, whole.reasoning) << "trial " << trial;
    EXPECT_EQ(d.content, whole.content) << "trial " << trial;
  }
}

TEST(ReasoningParser, StartsInReasoning) {
  ReasoningParser p(true);
  EXPECT_TRUE(p.in_reasoning());
  ReasoningParser::Delta d = p.push("Let me think.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(d.reasoning, "Let me think.\n");
  EXPECT_EQ(d.content, "\n\nThe answer is 4.");
  EXPECT_FALSE(p.in_reasoning());
  EXPECT_TRUE(p.finish().empty());
}

TEST(ReasoningParser, UnclosedReasoningStaysReasoning) {
  const ReasoningParser::Delta d = run_whole(true, "still thinking </thi");
  EXPECT_EQ(d.reasoning, "still thinking </thi");  // released at finish
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, NotInReasoningIsContent) {
  ReasoningParser p(false);
  EXPECT_FALSE(p.in_reasoning());
  ReasoningParser::Delta d = p.push("Plain answer, no </think> tags <think>.");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Plain answer, no </think> tags <think>.");
  EXPECT_TRUE(p.finish().empty());
}

TEST(ReasoningParser, ModelOpensThinkAtTheStart) {
  ReasoningParser::Delta d = run_whole(false, "\n<think>\nhmm\n</think>\n\nAnswer");
  EXPECT_EQ(d.reasoning, "\nhmm\n");
  EXPECT_EQ(d.content, "\n\nAnswer");
  d = run_whole(false, "Answer <think>not reasoning</think>");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer <think>not reasoning</think>");
  // With the block already open, a second open tag is reasoning text.
  d = run_whole(true, "<think>a</think>b");
  EXPECT_EQ(d.reasoning, "<think>a");
  EXPECT_EQ(d.content, "b");
}

TEST(ReasoningParser, UndecidedStartIsReleasedAtFinish) {
  ReasoningParser p(false);
  EXPECT_TRUE(p.push(" \n").empty());  // only whitespace: could still open a block
  EXPECT_TRUE(p.push("<thi").empty());
  const ReasoningParser::Delta d = p.finish();
  EXPECT_EQ(d.content, " \n<thi");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(run_whole(false, "  ").content, "  ");
}

TEST(ReasoningParser, TagsSplitAcrossPushes) {
  ReasoningParser p(true);
  EXPECT_EQ(p.push("abc</").reasoning, "abc");
  EXPECT_EQ(p.push("thin").reasoning, "");
  ReasoningParser::Delta d = p.push("k>def");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "def");
  d = p.push("</x");  // not a tag any more once in content
  EXPECT_EQ(d.content, "</x");

  ReasoningParser q(true);
  EXPECT_EQ(q.push("a</thinx").reasoning, "a</thinx");  // a prefix that did not become the tag
}

TEST(ReasoningParser, EveryCutGivesTheSameResult) {
  expect_cut_invariant(true, "Step 1 <b>.\n</think>\n\nAnswer </think> <think>");
  expect_cut_invariant(true, "<</</t</think>x");
  expect_cut_invariant(false, "  <think>r</think>c");
  expect_cut_invariant(false, "<thinking>not a tag</think>");
  expect_cut_invariant(false, "");
}

TEST(ReasoningParser, CustomTags) {
  ReasoningParser p(false, "[THINK]", "[/THINK]");
  ReasoningParser::Delta d = p.push("[THINK]r[/THINK]c");
  EXPECT_EQ(d.reasoning, "r");
  EXPECT_EQ(d.content, "c");
}

TEST(ReasoningParser, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>old</think> ... <think>\n"));
}

TEST(ReasoningParser, PartialTagSuffix) {
  EXPECT_EQ(partial_tag_suffix("abc</thi", "</think>"), 5u);
  EXPECT_EQ(partial_tag_suffix("abc<", "</think>"), 1u);
  EXPECT_EQ(partial_tag_suffix("abc</think>", "</think>"), 0u);  // whole tags are not partial
  EXPECT_EQ(partial_tag_suffix("", "</think>"), 0u);
  EXPECT_EQ(partial_tag_suffix("<<", "<a"), 1u);
}

}  // namespace
}  // namespace strata::server
