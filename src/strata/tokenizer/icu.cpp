#include "strata/tokenizer/icu.h"

#include <dlfcn.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uvernum.h>

#include <memory>
#include <mutex>
#include <vector>

#include "strata/core/error.h"
#include "strata/tokenizer/unicode.h"

namespace strata::tok {
namespace {

// The ICU headers rename every entry point (u_charType -> u_charType_72); the stringified
// macro gives the versioned symbol name to look up.
#define STRATA_ICU_STR2(x) #x
#define STRATA_ICU_STR(x) STRATA_ICU_STR2(x)

struct IcuApi {
  bool ok = false;
  std::string why;
  decltype(&unorm2_getNFCInstance) nfc = nullptr;
  decltype(&unorm2_getNFDInstance) nfd = nullptr;
  decltype(&unorm2_getNFKCInstance) nfkc = nullptr;
  decltype(&unorm2_getNFKDInstance) nfkd = nullptr;
  decltype(&unorm2_normalize) normalize = nullptr;
  decltype(&u_getIntPropertyValue) int_prop = nullptr;
  decltype(&u_hasBinaryProperty) bin_prop = nullptr;
  decltype(&u_charType) char_type = nullptr;
  const UNormalizer2* forms[4] = {};

  IcuApi() {
    void* h = nullptr;
    for (const char* name : {"libicuuc.so." U_ICU_VERSION_SHORT, "libicuuc.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
    }
    if (!h) {
      why = cat("cannot load ICU (libicuuc.so." U_ICU_VERSION_SHORT "): ", dlerror(),
                "; install the Debian package libicu-dev");
      return;
    }
    // The handle stays open for the life of the process.
    bool all = load(h, &nfc, STRATA_ICU_STR(unorm2_getNFCInstance)) &&
               load(h, &nfd, STRATA_ICU_STR(unorm2_getNFDInstance)) &&
               load(h, &nfkc, STRATA_ICU_STR(unorm2_getNFKCInstance)) &&
               load(h, &nfkd, STRATA_ICU_STR(unorm2_getNFKDInstance)) &&
               load(h, &normalize, STRATA_ICU_STR(unorm2_normalize)) &&
               load(h, &int_prop, STRATA_ICU_STR(u_getIntPropertyValue)) &&
               load(h, &bin_prop, STRATA_ICU_STR(u_hasBinaryProperty)) &&
               load(h, &char_type, STRATA_ICU_STR(u_charType));
    if (!all) return;
    UErrorCode err = U_ZERO_ERROR;
    forms[0] = nfc(&err);
    forms[1] = nfd(&err);
    forms[2] = nfkc(&err);
    forms[3] = nfkd(&err);
    if (U_FAILURE(err)) {
      why = "ICU normalizer data failed to load";
      return;
    }
    ok = true;
  }

  template <class F>
  bool load(void* h, F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(h, name));
    if (!*f) why = cat("ICU symbol ", name, " not found");
    return *f != nullptr;
  }
};

const IcuApi& api() {
  static const IcuApi a;
  return a;
}

const IcuApi& checked(const char* what) {
  const IcuApi& a = api();
  if (!a.ok) fail(what, ": ", a.why);
  return a;
}

// Code points below kTableLimit whose quick check is YES and whose combining class is 0:
// a run of them is unchanged by the normalization form.
constexpr uint32_t kTableLimit = 0x30000;

struct QuickTable {
  std::vector<uint64_t> bits;
};

bool stable_char(const IcuApi& a, NormForm form, uint32_t cp) {
  static constexpr UProperty kQc[4] = {UCHAR_NFC_QUICK_CHECK, UCHAR_NFD_QUICK_CHECK,
                                       UCHAR_NFKC_QUICK_CHECK, UCHAR_NFKD_QUICK_CHECK};
  return a.int_prop(UChar32(cp), kQc[int(form)]) == UNORM_YES &&
         a.int_prop(UChar32(cp), UCHAR_CANONICAL_COMBINING_CLASS) == 0;
}

const QuickTable& quick_table(NormForm form) {
  static std::once_flag once[4];
  static QuickTable tables[4];
  int f = int(form);
  std::call_once(once[f], [&] {
    const IcuApi& a = checked("normalizer");
    tables[f].bits.assign(kTableLimit / 64, 0);
    for (uint32_t cp = 0; cp < kTableLimit; ++cp) {
      if (stable_char(a, form, cp)) tables[f].bits[cp >> 6] |= uint64_t(1) << (cp & 63);
    }
  });
  return tables[f];
}

void to_utf16(std::string_view in, std::vector<UChar>* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size();) {
    int len;
    uint32_t cp = utf8_decode(in.data() + i, &len);
    i += size_t(len);
    if (cp < 0x10000) {
      out->push_back(UChar(cp));
    } else {
      cp -= 0x10000;
      out->push_back(UChar(0xd800 + (cp >> 10)));
      out->push_back(UChar(0xdc00 + (cp & 0x3ff)));
    }
  }
}

void from_utf16(const UChar* p, size_t n, std::string* out) {
  out->clear();
  out->reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = p[i];
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < n) {
      c = 0x10000 + ((c - 0xd800) << 10) + (uint32_t(p[i + 1]) - 0xdc00);
      ++i;
    }
    utf8_append(out, c);
  }
}

}  // namespace

void icu_require(const std::string& what) { checked(what.c_str()); }

namespace {

bool stable_at(const QuickTable& t, NormForm form, uint32_t cp) {
  return cp < kTableLimit ? (t.bits[cp >> 6] >> (cp & 63)) & 1 : stable_char(api(), form, cp);
}

}  // namespace

bool icu_is_normalized_quick(NormForm form, std::string_view in) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  size_t n = in.size(), i = 0;
  const QuickTable* t = nullptr;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    if (!t) t = &quick_table(form);
    int len;
    uint32_t cp = utf8_decode(in.data() + i, &len);
    i += size_t(len);
    if (!stable_at(*t, form, cp)) return false;
  }
  return true;
}

// A stable character (quick check YES, combining class 0) is a normalization boundary: text on
// either side of it normalizes independently. Only the stretches around unstable characters,
// from the last boundary before them to the next one after, go through ICU.
void icu_normalize_regions(NormForm form, std::string_view in, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const QuickTable& t = quick_table(form);
  size_t n = in.size(), i = 0, copied = 0, boundary = 0;
  std::string region;
  out->clear();
  while (i < n) {
    if (p[i] < 0x80) {
      boundary = i++;
      continue;
    }
    int len;
    uint32_t cp = utf8_decode(in.data() + i, &len);
    if (stable_at(t, form, cp)) {
      boundary = i;
      i += size_t(len);
      continue;
    }
    size_t j = i + size_t(len);
    while (j < n) {
      if (p[j] < 0x80) break;
      uint32_t c2 = utf8_decode(in.data() + j, &len);
      if (stable_at(t, form, c2)) break;
      j += size_t(len);
    }
    out->append(in.data() + copied, boundary - copied);
    icu_normalize(form, in.substr(boundary, j - boundary), &region);
    out->append(region);
    copied = i = boundary = j;
  }
  out->append(in.data() + copied, n - copied);
}

void icu_normalize(NormForm form, std::string_view in, std::string* out) {
  const IcuApi& a = checked("normalizer");
  thread_local std::vector<UChar> src, dst;
  to_utf16(in, &src);
  dst.resize(src.size() * 3 + 16);
  UErrorCode err = U_ZERO_ERROR;
  int32_t n = a.normalize(a.forms[int(form)], src.data(), int32_t(src.size()), dst.data(),
                          int32_t(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    dst.resize(size_t(n));
    err = U_ZERO_ERROR;
    n = a.normalize(a.forms[int(form)], src.data(), int32_t(src.size()), dst.data(),
                    int32_t(dst.size()), &err);
  }
  if (U_FAILURE(err)) fail("normalizer: ICU unorm2_normalize failed (error ", int(err), ")");
  from_utf16(dst.data(), size_t(n), out);
}

bool icu_is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  int8_t t = checked("Digits pre-tokenizer").char_type(UChar32(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool icu_is_word_char(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  const IcuApi& a = checked("added token single_word");
  if (a.bin_prop(UChar32(cp), UCHAR_ALPHABETIC) || a.bin_prop(UChar32(cp), UCHAR_JOIN_CONTROL)) {
    return true;
  }
  int8_t t = a.char_type(UChar32(cp));
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

}  // namespace strata::tok
