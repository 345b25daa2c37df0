// SPDX-License-Identifier: MIT
// The proof an agent that connects to its controller over TCP (a Slurm run: `pipewright-agent --connect`) gives
// before the protocol starts. The controller sends kConnectHello and a fresh 32-byte nonce; the agent answers
// kConnectAnswer, its task number (big-endian 32 bits: its place among the run's agents) and
// HMAC-SHA256(secret, kConnectLabel | nonce | task). The secret is the run's, 32 random bytes in a 0600 file that
// only the user's processes read; it never travels. A wrong answer closes the connection. The MAC is OpenSSL's,
// loaded when first needed (crypto.h).
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "crypto.h"

namespace pw::agents {

inline constexpr std::string_view kConnectHello = "PWC1";
inline constexpr std::string_view kConnectAnswer = "PWA1";
inline constexpr std::string_view kConnectLabel = "pipewright-connect-v1";
inline constexpr std::size_t kConnectNonceBytes = 32;
inline constexpr std::size_t kConnectMacBytes = 32;
/// The answer's size: kConnectAnswer, the task, the MAC.
inline constexpr std::size_t kConnectAnswerBytes = 4 + 4 + kConnectMacBytes;

/// HMAC-SHA256(secret, kConnectLabel | nonce | task as 4 bytes big-endian).
inline std::array<unsigned char, kConnectMacBytes> connectMac(
    const std::vector<std::uint8_t>& secret, std::string_view nonce, std::uint32_t task)
{
    std::string data(kConnectLabel);
    data += nonce;
    for (int shift = 24; shift >= 0; shift -= 8)
        data += static_cast<char>((task >> shift) & 0xff);
    static_assert(kConnectMacBytes == std::tuple_size_v<crypto::Digest>);
    return crypto::hmacSha256(secret, data);
}

/// The agent's answer to `nonce`.
inline std::string connectAnswer(const std::vector<std::uint8_t>& secret, std::string_view nonce, std::uint32_t task)
{
    std::string out(kConnectAnswer);
    for (int shift = 24; shift >= 0; shift -= 8)
        out += static_cast<char>((task >> shift) & 0xff);
    const auto mac = connectMac(secret, nonce, task);
    out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
    return out;
}

/// The task an answer proves, or -1 when it is not a valid answer to `nonce` under `secret` (compared in constant
/// time).
inline long checkConnectAnswer(const std::vector<std::uint8_t>& secret, std::string_view nonce, std::string_view answer)
{
    if (answer.size() != kConnectAnswerBytes || answer.substr(0, 4) != kConnectAnswer)
        return -1;
    std::uint32_t task = 0;
    for (std::size_t i = 4; i < 8; ++i)
        task = (task << 8) | static_cast<unsigned char>(answer[i]);
    const auto mac = connectMac(secret, nonce, task);
    if (!crypto::equalBytes(mac.data(), answer.data() + 8, mac.size()))
        return -1;
    return static_cast<long>(task);
}

} // namespace pw::agents
