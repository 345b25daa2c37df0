// SPDX-License-Identifier: MIT
// The cryptography of the controller's side of the protocols: HMAC-SHA256 (the connect handshake's proof,
// connect_auth.h), SHA-256 (the agent build's name in a host's cache) and a constant-time comparison from OpenSSL's
// libcrypto, which is loaded on first use rather than linked; random bytes come from the kernel (getrandom(2)).
// So the CLI and the app start without mapping libcrypto (2 ms of every start, issue 30 item 10); a run that proves
// or names something loads it then. The agent links libcrypto anyway (its Gloo handshake, engine/).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pw::agents::crypto {

using Digest = std::array<unsigned char, 32>;

/// HMAC-SHA256 of `data` under `key`. Throws std::runtime_error where libcrypto cannot be loaded (naming it and
/// the package that has it) or the MAC fails.
Digest hmacSha256(std::span<const std::uint8_t> key, std::string_view data);
/// SHA-256 of `data`; throws as hmacSha256.
Digest sha256(std::string_view data);
/// Whether the `n` bytes at `a` and `b` are equal, in time that does not depend on where they differ
/// (CRYPTO_memcmp); throws as hmacSha256.
bool equalBytes(const void* a, const void* b, std::size_t n);
/// Fills `out` from the kernel's random source (getrandom(2), which blocks only until the pool is first seeded);
/// throws std::runtime_error when it cannot.
void randomBytes(std::span<std::uint8_t> out);
/// Whether libcrypto is loaded in this process (a test checks that starting, planning and simulating do not).
bool loaded();

} // namespace pw::agents::crypto
