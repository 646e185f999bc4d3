// The output items of one /v1/responses response (reasoning, message, function_call), built
// from the chat output parser's deltas, with the streaming events that build them on the
// client. The whole response and the stream go through the same steps, so they agree.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/server/chat_output.h"

namespace strata::server {

class ResponseItems {
 public:
  // `ids`: the response's id suffix, which the item ids share ("msg_<ids>_0", ...).
  explicit ResponseItems(std::string ids) : ids_(std::move(ids)) {}

  // The events (without sequence_number) that a delta adds.
  std::vector<nlohmann::ordered_json> push(const ChatDelta& d);
  // Closes the open item; a response without any output gets an empty message. `status` is the
  // message's: "completed" or "incomplete".
  std::vector<nlohmann::ordered_json> finish(const std::string& status);
  const nlohmann::ordered_json& output() const { return output_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  std::vector<nlohmann::ordered_json> open(Kind kind, const ToolCallDelta* call);
  std::vector<nlohmann::ordered_json> close(const std::string& status);
  nlohmann::ordered_json& item() { return output_.back(); }
  nlohmann::ordered_json at_item() const;  // item_id and output_index of the open item

  std::string ids_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  Kind open_ = Kind::kNone;
  int open_call_ = -1;
  std::string text_;  // of the open reasoning or message item
};

}  // namespace strata::server
