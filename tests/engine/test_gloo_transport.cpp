// SPDX-License-Identifier: MIT
// The Gloo transport against a stranger on its listeners: devices as threads of this process over real TCP
// sockets, the rendezvous store in memory. The store lets the test see each listener's address the moment it is
// published, so the stranger always connects first (the race a local process wins only sometimes): it sends
// garbage, or replays and reflects what the device sent it. The rendezvous must start over and the devices then
// exchange exactly their own data; a stranger on every attempt ends in an error naming its address.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/gloo_transport.h"
#include "engine/transport.h"

using namespace pw;
using Catch::Contains;

namespace {

enum class Attack { Garbage, Replay };

/// @brief A process that is no agent of the run: connects to listeners and speaks nonsense or replays bytes.
class Stranger
{
public:
    explicit Stranger(Attack attack)
        : m_attack(attack)
    {
    }
    ~Stranger()
    {
        m_stop = true;
        if (m_echo.joinable())
            m_echo.join();
        for (int fd : m_fds)
            ::close(fd);
    }

    /// Connects to the listener at `ss` before anyone else can; returns the local address ("127.0.0.1:PORT").
    std::string strike(const sockaddr_storage& ss)
    {
        // Called on a device's thread: failures are exceptions (Catch's assertions are for the main thread).
        const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0)
            throw std::runtime_error("the stranger could not connect to a listener");
        sockaddr_storage self {};
        socklen_t selfLen = sizeof(self);
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &selfLen);
        char host[INET6_ADDRSTRLEN] = {};
        const void* addr = self.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&self)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr);
        ::inet_ntop(self.ss_family, addr, host, sizeof(host));
        const int port = ntohs(self.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&self)->sin_port
                                                         : reinterpret_cast<sockaddr_in6*>(&self)->sin6_port);
        std::lock_guard lock(m_mutex);
        if (m_attack == Attack::Garbage) {
            std::mt19937 rng(static_cast<unsigned>(m_fds.size() + 1));
            std::vector<unsigned char> garbage(256);
            for (auto& b : garbage)
                b = static_cast<unsigned char>(rng());
            if (::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL) != 256)
                throw std::runtime_error("the stranger could not send its garbage");
        } else {
            // What earlier connections sent us, replayed to this one; what this one sends is echoed back.
            if (!m_recorded.empty())
                ::send(fd, m_recorded.data(), m_recorded.size(), MSG_NOSIGNAL);
            if (!m_echo.joinable())
                m_echo = std::thread([this] { echoLoop(); });
        }
        m_fds.push_back(fd);
        const std::string local = std::string(self.ss_family == AF_INET6 ? "[" : "") + host
            + (self.ss_family == AF_INET6 ? "]" : "") + ":" + std::to_string(port);
        m_addresses.push_back(local);
        return local;
    }

    std::vector<std::string> addresses()
    {
        std::lock_guard lock(m_mutex);
        return m_addresses;
    }
    std::size_t bytesHeard()
    {
        std::lock_guard lock(m_mutex);
        return m_recorded.size();
    }

private:
    void echoLoop()
    {
        while (!m_stop) {
            std::vector<pollfd> ps;
            {
                std::lock_guard lock(m_mutex);
                for (int fd : m_fds)
                    ps.push_back({fd, POLLIN, 0});
            }
            if (::poll(ps.data(), ps.size(), 20) <= 0)
                continue;
            for (const auto& p : ps) {
                if (!(p.revents & POLLIN))
                    continue;
                char buf[4096];
                const ssize_t n = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n <= 0)
                    continue;
                ::send(p.fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL); // reflected
                std::lock_guard lock(m_mutex);
                m_recorded.insert(m_recorded.end(), buf, buf + n);
            }
        }
    }

    Attack m_attack;
    std::mutex m_mutex;
    std::vector<int> m_fds;
    std::vector<std::string> m_addresses;
    std::vector<char> m_recorded;
    std::thread m_echo;
    std::atomic<bool> m_stop {false};
};

/// @brief The run's rendezvous store (in memory), which shows the stranger every published set of listener
/// addresses before the peers can read it, for the first `attempts` attempts of the mesh.
class WatchedStore final : public gloo::rendezvous::Store
{
public:
    WatchedStore(Stranger& stranger, int attempts)
        : m_stranger(stranger)
        , m_attempts(attempts)
    {
    }
    void set(const std::string& key, const std::vector<char>& data) override
    {
        // The transport's keys: PREFIX/mesh/ATTEMPT/addr/RANK, one address per rank (the own slot zeroed).
        const auto at = key.find("/mesh/");
        if (at != std::string::npos && key.find("/addr/") != std::string::npos
            && std::stoi(key.substr(at + 6)) <= m_attempts) {
            const std::size_t size = gloo::transport::tcp::Address().bytes().size();
            for (std::size_t off = 0; off + size <= data.size(); off += size) {
                const gloo::transport::tcp::Address address(
                    std::vector<char>(data.begin() + static_cast<std::ptrdiff_t>(off),
                        data.begin() + static_cast<std::ptrdiff_t>(off + size)));
                if (address.getSockaddr().ss_family == AF_INET || address.getSockaddr().ss_family == AF_INET6)
                    m_stranger.strike(address.getSockaddr());
            }
        }
        m_inner.set(key, data);
    }
    std::vector<char> get(const std::string& key) override { return m_inner.get(key); }
    void wait(const std::vector<std::string>& keys) override { m_inner.wait(keys); }
    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override
    {
        m_inner.wait(keys, timeout);
    }

private:
    Stranger& m_stranger;
    int m_attempts;
    gloo::rendezvous::HashStore m_inner;
};

struct MeshResult
{
    std::vector<std::string> errors; ///< per device, empty: connected
    std::vector<std::vector<float>> received; ///< per device: what it received from the other
    std::vector<std::vector<float>> reduced; ///< per device: the all-reduce's result
    std::vector<std::string> warnings;
    std::vector<std::string> stranger; ///< the stranger's addresses, one per connection it made
};

/// Whether a warning names one of the stranger's connections by its address.
bool namesStranger(const MeshResult& r)
{
    for (const auto& w : r.warnings)
        for (const auto& a : r.stranger)
            if (w.find("the connection from " + a + " as device") != std::string::npos)
                return true;
    return false;
}

/// Two devices connect (a stranger on the listeners of the first `attacked` attempts), then each sends the other
/// its own data and both all-reduce.
MeshResult runMesh(Attack attack, int attacked, std::vector<std::uint8_t> secret = std::vector<std::uint8_t>(32, 7))
{
    Stranger stranger(attack);
    auto store = std::make_shared<WatchedStore>(stranger, attacked);
    MeshResult r;
    r.errors.resize(2);
    r.received.assign(2, std::vector<float>(64, 0.0f));
    r.reduced.resize(2);
    std::mutex mutex;
    std::vector<std::thread> devices;
    for (int d = 0; d < 2; ++d)
        devices.emplace_back([&, d] {
            try {
                engine::GlooOptions o;
                o.prefix = "run-1";
                o.secret = secret;
                o.timeout = std::chrono::seconds(20);
                o.connect_timeout = std::chrono::seconds(2);
                o.warn = [&](const std::string& text) {
                    std::lock_guard lock(mutex);
                    r.warnings.push_back(text);
                };
                auto t = engine::makeGlooTransport(d, 2, store, o);
                t->makeGroups({{0, 1}});
                std::vector<float> mine(64);
                for (std::size_t i = 0; i < mine.size(); ++i)
                    mine[i] = static_cast<float>(d * 1000 + static_cast<int>(i));
                // Both send before they receive, posted as one exchange.
                auto& received = r.received[static_cast<std::size_t>(d)];
                const std::vector<engine::Transfer> exchange {
                    {engine::Transfer::Direction::Send, 1 - d, engine::transferTag(false, d, 0),
                        {mine.data(), engine::DType::F32, mine.size()}},
                    {engine::Transfer::Direction::Recv, 1 - d, engine::transferTag(false, 1 - d, 0),
                        {received.data(), engine::DType::F32, received.size()}}};
                for (auto& h : t->exchange(exchange))
                    h.wait();
                t->flush();
                std::vector<float> sum(8, static_cast<float>(d + 1));
                t->allReduceSum({0, 1}, {sum.data(), engine::DType::F32, sum.size()}).wait();
                r.reduced[static_cast<std::size_t>(d)] = sum;
            } catch (const std::exception& e) {
                std::lock_guard lock(mutex);
                r.errors[static_cast<std::size_t>(d)] = e.what();
            }
        });
    for (auto& t : devices)
        t.join();
    r.stranger = stranger.addresses();
    return r;
}

} // namespace

TEST_CASE("a stranger on the Gloo listeners during rendezvous is survived: the devices get only each other's "
          "data",
    "[engine][gloo][security]")
{
    for (const Attack attack : {Attack::Garbage, Attack::Replay}) {
        INFO((attack == Attack::Garbage ? "garbage" : "replayed and reflected bytes"));
        const auto r = runMesh(attack, 1);
        CHECK(r.errors[0].empty());
        CHECK(r.errors[1].empty());
        INFO(r.errors[0] << " | " << r.errors[1]);
        REQUIRE((r.errors[0].empty() && r.errors[1].empty()));
        for (int d = 0; d < 2; ++d)
            for (std::size_t i = 0; i < 64; ++i)
                REQUIRE(r.received[static_cast<std::size_t>(d)][i]
                    == static_cast<float>((1 - d) * 1000 + static_cast<int>(i)));
        CHECK(r.reduced[0] == std::vector<float>(8, 3.0f));
        CHECK(r.reduced[1] == std::vector<float>(8, 3.0f));
        // The failed attempt is reported, naming the connection that was not a device's.
        REQUIRE_FALSE(r.warnings.empty());
        CHECK_THAT(r.warnings.front(), Contains("attempt 1 of 4") && Contains("starting over with new listeners"));
        std::string all;
        for (const auto& w : r.warnings)
            all += w + "\n";
        INFO(all);
        CHECK(namesStranger(r));
    }
}

TEST_CASE("a stranger on every rendezvous attempt ends in a clear error naming its address", "[engine][gloo][security]")
{
    const auto r = runMesh(Attack::Garbage, 100);
    for (const auto& e : r.errors) {
        CHECK_THAT(e, Contains("Gloo rendezvous for mesh failed 4 times") && Contains("threat model"));
    }
    std::string all;
    for (const auto& w : r.warnings)
        all += w + "\n";
    INFO(all);
    CHECK(namesStranger(r));
    CHECK(r.received[0] == std::vector<float>(64, 0.0f)); // nothing was ever received
    CHECK(r.received[1] == std::vector<float>(64, 0.0f));
}

TEST_CASE("devices with different keys never connect: a proof from another run fails", "[engine][gloo][security]")
{
    // One device of another run (another key) is as good as a stranger: each side names the other's connection.
    Stranger nobody(Attack::Garbage);
    auto store = std::make_shared<WatchedStore>(nobody, 0);
    std::vector<std::string> errors(2);
    std::vector<std::thread> devices;
    for (int d = 0; d < 2; ++d)
        devices.emplace_back([&, d] {
            try {
                engine::GlooOptions o;
                o.prefix = "run-1";
                o.secret = std::vector<std::uint8_t>(32, static_cast<std::uint8_t>(d));
                o.attempts = 2;
                o.timeout = std::chrono::seconds(20);
                o.connect_timeout = std::chrono::seconds(2);
                engine::makeGlooTransport(d, 2, store, o);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(d)] = e.what();
            }
        });
    for (auto& t : devices)
        t.join();
    for (const auto& e : errors)
        CHECK_THAT(e, Contains("failed the handshake") && Contains("failed 2 times"));
}

TEST_CASE("the Gloo transport refuses to start without the run's key", "[engine][gloo][security]")
{
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    engine::GlooOptions o;
    CHECK_THROWS_WITH(engine::makeGlooTransport(0, 2, store, o), Contains("needs the run's secret"));
}

TEST_CASE("host staging over Gloo carries bf16 activations as bf16 and sums bf16 gradients in fp32", "[engine][gloo]")
{
    // Two devices whose memory is bf16 (CPU buffers of bf16 elements: not the host's fp32, so they are staged): a
    // transfer arrives as the same bits, an all-reduce as the fp32 sum rounded once.
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::vector<float>> received(2), reduced(2);
    std::vector<std::string> errors(2);
    const auto valuesOf = [](int d, std::size_t n, float scale) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i)
            v[i] = scale * static_cast<float>(d * 100 + static_cast<int>(i)) + 0.1234567f;
        return v;
    };
    std::vector<std::thread> devices;
    for (int d = 0; d < 2; ++d)
        devices.emplace_back([&, d] {
            try {
                const auto backend = engine::makeCpuBackend();
                engine::GlooOptions o;
                o.prefix = "bf16";
                o.secret.assign(32, 5);
                o.timeout = std::chrono::seconds(20);
                auto gloo = engine::makeGlooTransport(d, 2, store, o);
                auto t = engine::throughHost(*gloo, *backend);
                t->makeGroups({{0, 1}});
                const std::size_t n = 37;
                engine::Buffer mine(*backend, n, engine::DType::BF16), theirs(*backend, n, engine::DType::BF16);
                const auto values = valuesOf(d, n, 1.0f);
                backend->upload(mine.data(), engine::DType::BF16, values.data(), n);
                for (int round = 0; round < 3; ++round) { // later rounds reuse the staging
                    const std::vector<engine::Transfer> exchange {
                        {engine::Transfer::Direction::Send, 1 - d, engine::transferTag(false, d, round), region(mine)},
                        {engine::Transfer::Direction::Recv, 1 - d, engine::transferTag(false, 1 - d, round),
                            region(theirs)}};
                    for (auto& h : t->exchange(exchange))
                        h.wait();
                }
                t->flush();
                received[static_cast<std::size_t>(d)].resize(n);
                backend->download(received[static_cast<std::size_t>(d)].data(), theirs.data(), engine::DType::BF16, n);
                t->allReduceSum({0, 1}, region(mine)).wait();
                reduced[static_cast<std::size_t>(d)].resize(n);
                backend->download(reduced[static_cast<std::size_t>(d)].data(), mine.data(), engine::DType::BF16, n);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(d)] = e.what();
            }
        });
    for (auto& t : devices)
        t.join();
    REQUIRE(errors == std::vector<std::string> {"", ""});
    // What a CPU backend makes of fp32 values as bf16, and back.
    const auto bf16 = [](std::vector<float> v) {
        const auto b = engine::makeCpuBackend();
        engine::Buffer x(*b, v.size(), engine::DType::BF16);
        b->upload(x.data(), engine::DType::BF16, v.data(), v.size());
        b->download(v.data(), x.data(), engine::DType::BF16, v.size());
        return v;
    };
    for (int d = 0; d < 2; ++d) {
        CHECK(received[static_cast<std::size_t>(d)] == bf16(valuesOf(1 - d, 37, 1.0f)));
        std::vector<float> sum(37);
        const auto a = bf16(valuesOf(0, 37, 1.0f)), b = bf16(valuesOf(1, 37, 1.0f));
        for (std::size_t i = 0; i < sum.size(); ++i)
            sum[i] = a[i] + b[i];
        CHECK(reduced[static_cast<std::size_t>(d)] == bf16(sum));
    }
}
