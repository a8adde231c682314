#include "common/util/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace specd {
namespace {
EVP_MD_CTX* Ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }
// EVP calls fail only when out of memory or on a broken OpenSSL install:
// nothing the caller could handle, and a wrong digest must never be returned.
void Require(int ok) {
  if (ok != 1) std::abort();
}
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) std::abort();
  Require(EVP_DigestInit_ex(Ctx(ctx_), EVP_sha256(), nullptr));
}

Sha256::~Sha256() { EVP_MD_CTX_free(Ctx(ctx_)); }

void Sha256::Update(const void* data, size_t n) {
  if (n > 0) Require(EVP_DigestUpdate(Ctx(ctx_), data, n));
}

std::array<uint8_t, 32> Sha256::Final() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  Require(EVP_DigestFinal_ex(Ctx(ctx_), out.data(), &len));
  if (len != out.size()) std::abort();
  return out;
}

std::string Sha256::FinalHex() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : Final()) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string Sha256Hex(std::string_view data) { return Sha256Hex(data.data(), data.size()); }

std::string Sha256Hex(const void* data, size_t n) {
  Sha256 h;
  h.Update(data, n);
  return h.FinalHex();
}

}  // namespace specd
