// SHA-256 through OpenSSL (EVP): vocabulary digests, content fingerprints,
// and the constant-time comparison of secrets.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
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
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::array<uint8_t, 32> Sha256Digest(std::string_view data);
std::string Sha256Hex(std::string_view data);
// The digest of n bytes at `data`, as 64 lowercase hex digits (weight tensors: gigabytes at a target's start).
std::string Sha256Hex(const void* data, size_t n);

}  // namespace specd
