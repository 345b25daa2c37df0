// SPDX-License-Identifier: MIT
// libcrypto loaded at run time (crypto.h).
#include "crypto.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <sys/random.h>

#include "planner/runtime_library.h"

namespace pw::agents::crypto {

namespace {

#define PW_STRINGIFY2(x) #x
#define PW_STRINGIFY(x) PW_STRINGIFY2(x)
/// The SONAME of the OpenSSL these headers are: libcrypto.so.3 for OpenSSL 3.
constexpr const char* kLibrary = "libcrypto.so." PW_STRINGIFY(OPENSSL_VERSION_MAJOR);

struct Api
{
    decltype(&::HMAC) hmac = nullptr;
    decltype(&::EVP_sha256) sha256 = nullptr;
    decltype(&::EVP_Digest) digest = nullptr;
    decltype(&::CRYPTO_memcmp) memcmp = nullptr;
};

std::atomic<bool> g_loaded {false};

const Api& api()
{
    static const std::pair<Api, std::string> loadedApi = [] {
        planner::RuntimeLibrary lib(
            kLibrary, "proving a connection and naming a build need OpenSSL's libcrypto (Debian: apt install libssl3)");
        Api a;
        lib.find(a.hmac, "HMAC");
        lib.find(a.sha256, "EVP_sha256");
        lib.find(a.digest, "EVP_Digest");
        lib.find(a.memcmp, "CRYPTO_memcmp");
        g_loaded = lib.ok();
        return std::pair {a, lib.error()};
    }();
    if (!loadedApi.second.empty())
        throw std::runtime_error(loadedApi.second);
    return loadedApi.first;
}

} // namespace

Digest hmacSha256(std::span<const std::uint8_t> key, std::string_view data)
{
    const Api& a = api();
    Digest out {};
    unsigned int length = 0;
    if (!a.hmac(a.sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &length)
        || length != out.size())
        throw std::runtime_error("HMAC-SHA256 failed (OpenSSL)");
    return out;
}

Digest sha256(std::string_view data)
{
    const Api& a = api();
    Digest out {};
    unsigned int length = 0;
    if (!a.digest(data.data(), data.size(), out.data(), &length, a.sha256(), nullptr) || length != out.size())
        throw std::runtime_error("SHA-256 failed (OpenSSL)");
    return out;
}

bool equalBytes(const void* a, const void* b, std::size_t n)
{
    return api().memcmp(a, b, n) == 0;
}

void randomBytes(std::span<std::uint8_t> out)
{
    std::size_t done = 0;
    while (done < out.size()) {
        const ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::runtime_error(
                std::string("no random bytes from the kernel (getrandom: ") + std::strerror(errno) + ")");
        done += static_cast<std::size_t>(n);
    }
}

bool loaded()
{
    return g_loaded;
}

} // namespace pw::agents::crypto
