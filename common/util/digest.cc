#include "common/util/digest.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace specd {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  // Only an allocation failure can make these fail: nothing sensible to do then.
  if (!ctx_->md || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() = default;

void Sha256::Update(const void* data, size_t n) { EVP_DigestUpdate(ctx_->md, data, n); }

std::array<uint8_t, 32> Sha256::Final() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, out.data(), &len);
  return out;
}

std::string Sha256::FinalHex() {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : Final()) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::array<uint8_t, 32> Sha256Digest(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Final();
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.FinalHex();
}

std::string Sha256Hex(const void* data, size_t n) {
  Sha256 h;
  h.Update(data, n);
  return h.FinalHex();
}

}  // namespace specd
