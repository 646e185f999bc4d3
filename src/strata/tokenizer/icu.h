// ICU (Debian libicu72) loaded at run time for Unicode normalization and character properties.
// It is opened with dlopen so that strata_lib needs no extra link flag; the headers come from
// libicu-dev and pin the symbol version.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tok {

enum class NormForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };

// Normalizes valid UTF-8 `in` into `out` (replacing its contents). Throws strata::Error when
// ICU cannot be loaded.
void icu_normalize(NormForm form, std::string_view in, std::string* out);

// Same result as icu_normalize, sending only the parts around unstable characters to ICU.
void icu_normalize_regions(NormForm form, std::string_view in, std::string* out);

// True when `in` is certainly unchanged by `form` (a quick check; false means "maybe").
bool icu_is_normalized_quick(NormForm form, std::string_view in);

// Unicode general category tests used by pre-tokenizers and added-token matching.
bool icu_is_numeric(uint32_t cp);    // Rust char::is_numeric: Nd, Nl, No
bool icu_is_word_char(uint32_t cp);  // regex \w: Alphabetic, M, Nd, Pc, Join_Control

// Throws strata::Error naming `what` when ICU is not available.
void icu_require(const std::string& what);

}  // namespace strata::tok
