// SPDX-License-Identifier: MIT
// Gloo over TCP. Transfers use unbound buffers on one full-mesh context (slot = transferTag); each collective
// group gets a context of its own, made before the first step, so collectives never share slots with transfers.
//
// Rendezvous (per context, per attempt, keys under PREFIX/NAME/ATTEMPT/ in the store): every member says it is
// there (ready/R) and waits for the others; only then does it open its listeners (Gloo's per-pair listening
// sockets on the device's address), publish their addresses (addr/R) and connect pair by pair. A pair that fails
// to connect does not stop the others. Every connected pair is then proven (nonces, then HMAC-SHA256 answers over
// the connection itself) before any training byte crosses it, and every member publishes its verdict (outcome/R):
// all "ok" and the context is used; anything else and every member drops the attempt (closing its sockets) and
// starts the next one with new listeners and new keys.
#include "gloo_transport.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace pw::engine {

namespace {

using Clock = std::chrono::steady_clock;
using Bytes32 = std::array<unsigned char, 32>;

// The handshake's slots: far above any transfer or wave tag, and used only before training on a fresh context.
constexpr std::uint64_t kNonceSlot = 0xFFFF'FFFF'FFFF'FF00ULL;
constexpr std::uint64_t kProofSlot = kNonceSlot + 1;

/// A gloo::Context over pairs this file connected and verified itself (Gloo's connectFullMesh gives up at the
/// first pair that fails and cannot be told to check who connected).
class VerifiedContext final : public gloo::Context
{
public:
    VerifiedContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
        std::shared_ptr<gloo::transport::Context> pairs)
        : gloo::Context(rank, size)
    {
        device_ = std::move(device);
        transportContext_ = std::move(pairs);
    }
};

/// "127.0.0.1:29500", "[::1]:29500" (Gloo's own Address::str() shows the port's bytes swapped).
std::string formatAddress(const sockaddr_storage& ss)
{
    char text[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        const auto& in = reinterpret_cast<const sockaddr_in6&>(ss);
        ::inet_ntop(AF_INET6, &in.sin6_addr, text, sizeof(text));
        return "[" + std::string(text) + "]:" + std::to_string(ntohs(in.sin6_port));
    }
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(in.sin_port));
}

/// Where a pair's connection comes from. Gloo keeps the remote address to itself (and Debian's package lacks the
/// headers to reach it), but a pair's own address is its socket's local one, and the kernel's table of TCP
/// sockets (/proc/self/net/tcp, tcp6) has the connection with that local address, whose remote end is the one the
/// listener accepted, whoever that was. After Gloo closed its end (it closes a pair on bytes it cannot parse) a
/// local stranger's end is still there, with our address as its remote one.
std::string remoteAddress(gloo::transport::Pair& pair)
{
    const auto* address = dynamic_cast<const gloo::transport::tcp::Address*>(&pair.address());
    if (!address)
        return "an unknown address";
    const sockaddr_storage& local = address->getSockaddr();
    const bool v6 = local.ss_family == AF_INET6;
    // The table's addresses: the address's 32-bit words as in memory, in hex; the port in hex.
    auto hexAddress = [](const void* bytes, std::size_t size, std::uint16_t port) {
        std::string out;
        char word[9];
        for (std::size_t at = 0; at < size; at += 4) {
            std::uint32_t v = 0;
            std::memcpy(&v, static_cast<const char*>(bytes) + at, 4);
            std::snprintf(word, sizeof(word), "%08X", v);
            out += word;
        }
        std::snprintf(word, sizeof(word), "%04X", port);
        return out + ":" + word;
    };
    auto parse = [v6](const std::string& field) {
        sockaddr_storage ss {};
        const auto colon = field.find(':');
        unsigned char bytes[16] = {};
        for (std::size_t w = 0; w * 8 < colon && w < 4; ++w) {
            const auto v = static_cast<std::uint32_t>(std::stoul(field.substr(w * 8, 8), nullptr, 16));
            std::memcpy(bytes + 4 * w, &v, 4);
        }
        const auto port = htons(static_cast<std::uint16_t>(std::stoul(field.substr(colon + 1), nullptr, 16)));
        if (v6) {
            auto& in = reinterpret_cast<sockaddr_in6&>(ss);
            in.sin6_family = AF_INET6;
            in.sin6_port = port;
            std::memcpy(&in.sin6_addr, bytes, 16);
        } else {
            auto& in = reinterpret_cast<sockaddr_in&>(ss);
            in.sin_family = AF_INET;
            in.sin_port = port;
            std::memcpy(&in.sin_addr, bytes, 4);
        }
        return ss;
    };
    const std::string wanted = v6 ? hexAddress(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr, 16,
                                   ntohs(reinterpret_cast<const sockaddr_in6&>(local).sin6_port))
                                  : hexAddress(&reinterpret_cast<const sockaddr_in&>(local).sin_addr, 4,
                                      ntohs(reinterpret_cast<const sockaddr_in&>(local).sin_port));
    std::ifstream table(v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp");
    std::string line;
    std::getline(table, line); // header
    std::string fallback;
    while (std::getline(table, line)) {
        std::istringstream fields(line);
        std::string slot, localField, remoteField, state;
        fields >> slot >> localField >> remoteField >> state;
        if (state == "0A") // LISTEN
            continue;
        try {
            if (localField == wanted && state == "01") // ESTABLISHED: ours
                return formatAddress(parse(remoteField));
            if (remoteField == wanted && fallback.empty()) // the other end, on this host
                fallback = formatAddress(parse(localField));
        } catch (const std::exception&) { // a line of another format: not ours
        }
    }
    return fallback.empty() ? "an address no longer connected (to " + formatAddress(local) + " here)" : fallback;
}

/// HMAC-SHA256(secret, label | from | to | challenge | response): what `from` answers to `to`'s challenge.
/// Binding both ends and the attempt's label makes a proof useless on any other pair, attempt or run, and a
/// reflected proof (from and to swapped) never matches.
Bytes32 proof(const std::vector<std::uint8_t>& secret, const std::string& label, int from, int to,
    const Bytes32& challenge, const Bytes32& response)
{
    std::string message = "pipewright gloo pair v1";
    message.push_back('\0');
    message += label;
    message.push_back('\0');
    for (const int v : {from, to})
        for (int b = 0; b < 4; ++b)
            message.push_back(static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * b)) & 0xFF));
    message.append(reinterpret_cast<const char*>(challenge.data()), challenge.size());
    message.append(reinterpret_cast<const char*>(response.data()), response.size());
    Bytes32 out {};
    unsigned int length = 0;
    if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &length)
        || length != out.size())
        throw TransportError("HMAC-SHA256 failed (OpenSSL)");
    return out;
}

std::chrono::milliseconds until(Clock::time_point deadline)
{
    // Gloo reads a negative timeout as "the context's default": never pass one.
    return std::max(
        std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

/// "0, 1, 3": devices for a message.
std::string listOf(const std::vector<int>& devices)
{
    std::string out;
    for (int d : devices)
        out += (out.empty() ? "" : ", ") + std::to_string(d);
    return out;
}

std::string groupKey(const std::vector<int>& devices)
{
    std::string key = "group";
    for (int d : devices)
        key += "-" + std::to_string(d);
    return key;
}

class GlooTransport final : public Transport
{
public:
    GlooTransport(int device, std::vector<int> devices, std::shared_ptr<gloo::rendezvous::Store> store,
        const GlooOptions& options)
        : m_device(device)
        , m_members(std::move(devices))
        , m_store(std::move(store))
        , m_options(options)
    {
        gloo::transport::tcp::attr attr;
        if (!options.iface.empty())
            attr.iface = options.iface;
        else
            attr.hostname = options.hostname;
        if (m_options.secret.size() < 16)
            throw TransportError("device " + std::to_string(device)
                + ": the Gloo transport needs the run's secret (at least 16 bytes) to prove its connections");
        m_options.attempts = std::max(1, m_options.attempts);
        try {
            m_dev = gloo::transport::tcp::CreateDevice(attr);
        } catch (const std::exception& e) {
            throw TransportError("device " + std::to_string(device) + ": Gloo cannot listen on "
                + (options.iface.empty() ? options.hostname : "interface " + options.iface) + ": " + e.what());
        }
        if (!std::is_sorted(m_members.begin(), m_members.end())
            || std::adjacent_find(m_members.begin(), m_members.end()) != m_members.end()
            || !std::binary_search(m_members.begin(), m_members.end(), device))
            throw TransportError("device " + std::to_string(device) + " is not among the run's devices ("
                + listOf(m_members) + ", ascending, each once)");
        m_mesh = connect(m_members, "mesh");
    }

    ~GlooTransport() override
    {
        try {
            flush();
        } catch (...) { // a failed run: the peers are gone, nothing left to deliver
        }
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override
    {
        for (const auto& devices : groups)
            if (std::find(devices.begin(), devices.end(), m_device) != devices.end() && !m_groups.count(devices))
                m_groups[devices] = connect(devices, groupKey(devices));
    }

    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        // Any element type, byte for byte (bf16 activations staged from a GPU travel as bf16).
        const auto* first = static_cast<const std::byte*>(data.data);
        Pending p;
        if (!m_spare.empty()) { // a finished send's copy: after the first step, sends allocate nothing
            p.data = std::move(m_spare.back());
            m_spare.pop_back();
        }
        p.data.assign(first, first + data.bytes());
        p.buffer = m_mesh->createUnboundBuffer(p.data.data(), p.data.size());
        const int rank = meshRank(peer);
        guard("send to device " + std::to_string(peer), [&] { p.buffer->send(rank, tag); });
        m_pending.push_back(std::move(p));
        // Keep a bounded number in flight: the oldest send is done long before the queue fills.
        while (m_pending.size() > 64)
            waitOldest();
        return {}; // the data was copied: the region is free again
    }

    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        class Receive final : public Handle::Work
        {
        public:
            Receive(GlooTransport& t, int peer, std::unique_ptr<gloo::transport::UnboundBuffer> buffer)
                : m_transport(t)
                , m_peer(peer)
                , m_buffer(std::move(buffer))
            {
            }
            void wait() override
            {
                m_transport.guard("receive from device " + std::to_string(m_peer), [&] {
                    if (!m_buffer->waitRecv(m_transport.m_options.timeout))
                        throw TransportError("aborted");
                });
            }

        private:
            GlooTransport& m_transport;
            int m_peer;
            std::unique_ptr<gloo::transport::UnboundBuffer> m_buffer;
        };
        auto buffer = m_mesh->createUnboundBuffer(data.data, data.bytes());
        const int rank = meshRank(peer);
        guard("receive from device " + std::to_string(peer), [&] { buffer->recv(rank, tag); });
        return Handle(std::make_unique<Receive>(*this, peer, std::move(buffer)));
    }

    Handle allReduceSum(const std::vector<int>& devices, Region region) override
    {
        const std::span<float> data = host(region);
        const auto ctx = m_groups.find(devices);
        if (ctx == m_groups.end())
            throw TransportError("device " + std::to_string(m_device) + ": an all-reduce in " + groupKey(devices)
                + ", a group it did not make before the first step (makeGroups)");
        guard("all-reduce in " + groupKey(devices), [&] {
            gloo::AllreduceOptions opts(ctx->second);
            opts.setOutput(data.data(), data.size());
            opts.setReduceFunction(
                static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
            opts.setTimeout(m_options.timeout);
            gloo::allreduce(opts);
        });
        return {};
    }

    void flush() override
    {
        while (!m_pending.empty())
            waitOldest();
    }
    bool reaches(const Backend&) const override { return false; }
    Completion completion() const override { return Completion::Host; }

private:
    std::span<float> host(Region r) const
    {
        if (r.dtype != DType::F32)
            throw TransportError("device " + std::to_string(m_device)
                + ": the Gloo transport all-reduces fp32 host memory (stage other memory through throughHost)");
        return {static_cast<float*>(r.data), r.count};
    }

    /// The mesh's rank of device `peer` (its place among the run's devices).
    int meshRank(int peer) const
    {
        const auto at = std::lower_bound(m_members.begin(), m_members.end(), peer);
        if (at == m_members.end() || *at != peer)
            throw TransportError("device " + std::to_string(m_device) + ": device " + std::to_string(peer)
                + " is not among the run's devices (" + listOf(m_members) + ")");
        return static_cast<int>(at - m_members.begin());
    }

    struct Pending
    {
        std::vector<std::byte> data;
        std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    };

    /// A context among `members` (device numbers, ascending; this device among them) whose every connection was
    /// proven, after at most m_options.attempts rendezvous.
    std::shared_ptr<gloo::Context> connect(const std::vector<int>& members, const std::string& name)
    {
        const int size = static_cast<int>(members.size());
        const int rank = static_cast<int>(std::find(members.begin(), members.end(), m_device) - members.begin());
        const std::string me = "device " + std::to_string(m_device);
        std::string last;
        for (int attempt = 1; attempt <= m_options.attempts; ++attempt) {
            const std::string label = m_options.prefix + "/" + name + "/" + std::to_string(attempt);
            gloo::rendezvous::PrefixStore store(label, *m_store);
            try {
                // Listeners open only once every member is here, and only until its pairs are connected.
                store.set("ready/" + std::to_string(rank), {'1'});
                store.wait(keys("ready/", size), m_options.timeout);
            } catch (const std::exception& e) {
                throw TransportError(me + ": Gloo rendezvous for " + name + " failed: " + e.what());
            }
            std::string problem;
            auto ctx = tryConnect(store, members, rank, label, problem);
            std::map<int, std::string> failed; // member -> what it saw
            try {
                const std::string verdict = problem.empty() ? "ok" : problem;
                store.set("outcome/" + std::to_string(rank), {verdict.begin(), verdict.end()});
                store.wait(keys("outcome/", size), m_options.timeout);
                for (int r = 0; r < size; ++r) {
                    const auto v = store.get("outcome/" + std::to_string(r));
                    if (std::string(v.begin(), v.end()) != "ok")
                        failed[members[static_cast<std::size_t>(r)]] = std::string(v.begin(), v.end());
                }
            } catch (const std::exception& e) {
                throw TransportError(me + ": Gloo rendezvous for " + name + " failed: " + e.what());
            }
            if (failed.empty())
                return ctx;
            ctx.reset(); // closes this attempt's sockets, the strangers' included
            last.clear();
            for (const auto& [d, what] : failed)
                last += (last.empty() ? "" : "; ") + ("device " + std::to_string(d) + ": " + what);
            if (!problem.empty() && m_options.warn)
                m_options.warn(me + ": Gloo rendezvous for " + name + ", attempt " + std::to_string(attempt) + " of "
                    + std::to_string(m_options.attempts) + ", failed: " + problem
                    + (attempt < m_options.attempts ? "; starting over with new listeners" : ""));
        }
        throw TransportError(me + ": Gloo rendezvous for " + name + " failed " + std::to_string(m_options.attempts)
            + " times (is another process connecting to the run's ports? see the threat model in "
              "docs/execution.md); last: "
            + last);
    }

    static std::vector<std::string> keys(const std::string& prefix, int size)
    {
        std::vector<std::string> out;
        for (int r = 0; r < size; ++r)
            out.push_back(prefix + std::to_string(r));
        return out;
    }

    /// One attempt: listen, publish, connect every pair, prove every connection. `problem` says what failed
    /// (empty: nothing); the context is returned either way (the caller drops it unless every member succeeded).
    std::shared_ptr<gloo::Context> tryConnect(gloo::rendezvous::Store& store, const std::vector<int>& members, int rank,
        const std::string& label, std::string& problem)
    {
        const int size = static_cast<int>(members.size());
        auto note = [&problem](const std::string& what) { problem += (problem.empty() ? "" : "; ") + what; };
        auto pairs = m_dev->createContext(rank, size);
        // Gloo waits 5 times a pair's timeout for its connection.
        pairs->setTimeout(std::max(std::chrono::milliseconds(100), m_options.connect_timeout / 5));
        std::vector<char> addresses;
        std::size_t addressSize = 0;
        for (int r = 0; r < size; ++r) {
            if (r == rank)
                continue;
            const auto bytes = pairs->createPair(r)->address().bytes();
            addressSize = bytes.size();
            addresses.resize(addressSize * static_cast<std::size_t>(size));
            std::copy(bytes.begin(), bytes.end(), addresses.begin() + static_cast<std::ptrdiff_t>(addressSize * r));
        }
        store.set("addr/" + std::to_string(rank), addresses);
        std::vector<bool> connected(static_cast<std::size_t>(size), false);
        for (int r = 0; r < size; ++r) {
            if (r == rank)
                continue;
            const std::string peer = "device " + std::to_string(members[static_cast<std::size_t>(r)]);
            std::string listening = "?";
            try {
                store.wait({"addr/" + std::to_string(r)}, m_options.timeout);
                const auto theirs = store.get("addr/" + std::to_string(r));
                if (theirs.size() != addressSize * static_cast<std::size_t>(size))
                    throw TransportError(peer + " published addresses of another size");
                const auto at = theirs.begin() + static_cast<std::ptrdiff_t>(addressSize * rank);
                const std::vector<char> address(at, at + static_cast<std::ptrdiff_t>(addressSize));
                listening = formatAddress(gloo::transport::tcp::Address(address).getSockaddr());
                pairs->getPair(r)->connect(address);
                connected[static_cast<std::size_t>(r)] = true;
            } catch (const std::exception& e) {
                // Gloo's text ends with the cause ("...: Connection refused") after a location and an address
                // whose port it shows byte-swapped: keep the cause only.
                std::string cause = e.what();
                if (const auto colon = cause.rfind(": "); colon != std::string::npos)
                    cause = cause.substr(colon + 2);
                note("could not connect to " + peer + "'s listener at " + listening
                    + " (did another process take the connection?): " + cause);
            }
        }
        auto ctx = std::make_shared<VerifiedContext>(rank, size, m_dev, std::move(pairs));
        ctx->setTimeout(m_options.timeout);
        if (!problem.empty())
            return ctx; // a member that could not connect fails the attempt: no need to prove the rest
        prove(*ctx, members, label, note);
        return ctx;
    }

    /// Nonces out, nonces in, answers out, answers in: every pair at once, within the connect timeout.
    void prove(gloo::Context& ctx, const std::vector<int>& members, const std::string& label,
        const std::function<void(const std::string&)>& note)
    {
        const auto size = static_cast<std::size_t>(ctx.size);
        const auto rank = static_cast<std::size_t>(ctx.rank);
        struct Peer
        {
            Bytes32 mine {}, theirs {}, answer {}, received {};
            std::unique_ptr<gloo::transport::UnboundBuffer> nonceOut, nonceIn, answerOut, answerIn;
            bool failed = false;
        };
        std::vector<Peer> peers(size);
        const auto deadline = Clock::now() + m_options.connect_timeout;
        // Where each connection comes from, read at once: Gloo may close it on the stranger's bytes.
        std::vector<std::string> remote(size);
        for (std::size_t r = 0; r < size; ++r)
            if (r != rank)
                remote[r] = remoteAddress(*ctx.getPair(static_cast<int>(r)));
        auto who = [&](std::size_t r) {
            return "the connection from " + remote[r] + " as device " + std::to_string(members[r]);
        };
        auto fail = [&](std::size_t r, const std::string& what) {
            peers[r].failed = true;
            note(who(r) + " " + what);
        };
        for (std::size_t r = 0; r < size; ++r) {
            if (r == rank)
                continue;
            auto& p = peers[r];
            if (RAND_bytes(p.mine.data(), static_cast<int>(p.mine.size())) != 1)
                throw TransportError("no random bytes for the Gloo handshake (OpenSSL RAND_bytes)");
            p.nonceOut = ctx.createUnboundBuffer(p.mine.data(), p.mine.size());
            p.nonceIn = ctx.createUnboundBuffer(p.theirs.data(), p.theirs.size());
            p.answerOut = ctx.createUnboundBuffer(p.answer.data(), p.answer.size());
            p.answerIn = ctx.createUnboundBuffer(p.received.data(), p.received.size());
            try {
                // Both receives are posted before anything is sent: bytes a stranger sends for these slots land
                // in these buffers (and fail the proof) rather than in Gloo's "unexpected slot" path.
                p.nonceIn->recv(static_cast<int>(r), kNonceSlot);
                p.answerIn->recv(static_cast<int>(r), kProofSlot);
                p.nonceOut->send(static_cast<int>(r), kNonceSlot);
            } catch (const std::exception& e) {
                fail(r, std::string("broke before the handshake: ") + e.what());
            }
        }
        for (std::size_t r = 0; r < size; ++r) {
            auto& p = peers[r];
            if (r == rank || p.failed)
                continue;
            try {
                p.nonceIn->waitRecv(until(deadline));
                p.answer = proof(m_options.secret, label, members[rank], members[r], p.theirs, p.mine);
                p.answerOut->send(static_cast<int>(r), kProofSlot);
            } catch (const std::exception& e) {
                fail(r, std::string("sent no handshake: ") + e.what());
            }
        }
        for (std::size_t r = 0; r < size; ++r) {
            auto& p = peers[r];
            if (r == rank || p.failed)
                continue;
            try {
                p.answerIn->waitRecv(until(deadline));
                const Bytes32 expected = proof(m_options.secret, label, members[r], members[rank], p.mine, p.theirs);
                if (CRYPTO_memcmp(expected.data(), p.received.data(), expected.size()) != 0) {
                    fail(r, "failed the handshake (it is not that device: a stranger, or replayed bytes)");
                    continue;
                }
                p.nonceOut->waitSend(until(deadline));
                p.answerOut->waitSend(until(deadline));
            } catch (const std::exception& e) {
                fail(r, std::string("did not finish the handshake: ") + e.what());
            }
        }
    }

    void waitOldest()
    {
        auto p = std::move(m_pending.front());
        m_pending.pop_front();
        guard("send", [&] {
            if (!p.buffer->waitSend(m_options.timeout))
                throw TransportError("aborted");
        });
        if (m_spare.size() < 64)
            m_spare.push_back(std::move(p.data));
    }

    template <class F> void guard(const std::string& what, F&& f)
    {
        try {
            f();
        } catch (const TransportError&) {
            throw;
        } catch (const std::exception& e) {
            throw TransportError("device " + std::to_string(m_device) + ": " + what + " failed: " + e.what());
        }
    }

    int m_device;
    std::vector<int> m_members; ///< the run's devices, ascending: device m_members[r] is the mesh's rank r
    std::shared_ptr<gloo::rendezvous::Store> m_store;
    GlooOptions m_options;
    std::shared_ptr<gloo::transport::Device> m_dev;
    std::shared_ptr<gloo::Context> m_mesh;
    std::map<std::vector<int>, std::shared_ptr<gloo::Context>> m_groups;
    std::deque<Pending> m_pending;
    std::vector<std::vector<std::byte>> m_spare; ///< finished sends' copies, for the next sends
};

} // namespace

std::unique_ptr<Transport> makeGlooTransport(
    int device, std::vector<int> devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options)
{
    return std::make_unique<GlooTransport>(device, std::move(devices), std::move(store), options);
}

std::unique_ptr<Transport> makeGlooTransport(
    int device, int devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options)
{
    std::vector<int> all(static_cast<std::size_t>(std::max(0, devices)));
    std::iota(all.begin(), all.end(), 0);
    return makeGlooTransport(device, std::move(all), std::move(store), options);
}

} // namespace pw::engine
