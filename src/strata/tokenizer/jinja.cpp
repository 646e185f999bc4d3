// Template: compile once, render many times (see jinja.h).
#include "strata/tokenizer/jinja.h"

#include "strata/core/error.h"
#include "strata/tokenizer/jinja_interp.h"
#include "strata/tokenizer/jinja_parser.h"

namespace strata::jinja {

namespace {

// Makes the limits visible to the value helpers for the duration of a compile or render.
class ActiveLimits {
 public:
  explicit ActiveLimits(const Limits& l) : prev_(set_active_limits(&l)) { reset_steps(); }
  ~ActiveLimits() { set_active_limits(prev_); }
  ActiveLimits(const ActiveLimits&) = delete;
  ActiveLimits& operator=(const ActiveLimits&) = delete;

 private:
  const Limits* prev_;
};

}  // namespace

Template Template::compile(std::string_view source, const Limits& limits) {
  ActiveLimits active(limits);
  Template t;
  t.limits_ = limits;
  try {
    t.program_ = parse_template(source, limits);
  } catch (const Fault& f) {
    fail("chat template: ", f.message);
  }
  return t;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  STRATA_CHECK(context.is_object(), "chat template inputs must be a JSON object");
  ActiveLimits active(limits_);
  Value v;
  try {
    v = Value::from_json(context);
  } catch (const Fault& f) {
    fail("chat template inputs: ", f.message);
  }
  return render(v.dict());
}

std::string Template::render(const Dict& context) const {
  STRATA_CHECK(program_, "chat template was not compiled");
  ActiveLimits active(limits_);
  Interpreter interp(*program_, limits_, context);
  try {
    return interp.run();
  } catch (const Fault& f) {
    fail("chat template: ", f.message);
  }
}

}  // namespace strata::jinja
