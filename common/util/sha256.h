// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface (SHA-NI / AVX2 code
// paths where the CPU has them): vocabulary digests and the content digests
// of weight tensors (gigabytes at a target's start, common/memory).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specd {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> Final();
  std::string FinalHex();

 private:
  void* ctx_;  // EVP_MD_CTX
};

std::string Sha256Hex(std::string_view data);
// The digest of n bytes at `data`, as 64 lowercase hex digits.
std::string Sha256Hex(const void* data, size_t n);

}  // namespace specd
