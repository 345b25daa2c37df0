// SPDX-License-Identifier: MIT
// Transport: how a device's stages exchange activations and gradients with other devices and all-reduce with
// their replicas. The executor speaks only this interface; LocalFabric connects threads of one process (tests,
// in-process runs), GlooTransport connects processes over TCP (Debian's libgloo).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gloo::rendezvous {
class Store;
}

namespace pw::engine {

/// @brief A transfer or collective could not complete (peer gone, timeout, aborted run).
class TransportError : public std::runtime_error
{
public:
    using std::runtime_error::runtime_error;
};

class Transport
{
public:
    virtual ~Transport() = default;
    /// Posts a send and returns: the data is copied; sends to one peer arrive in the order they were posted.
    virtual void send(int peer, std::uint64_t tag, std::span<const float> data) = 0;
    /// Blocks until the send with this tag from `peer` has arrived in `data` (sizes must match).
    virtual void recv(int peer, std::uint64_t tag, std::span<float> data) = 0;
    /// Sums `data` over `devices` (ascending, this device among them) in place; blocks until every one has
    /// contributed. Every member calls it for the same groups in the same order.
    virtual void allReduceSum(const std::vector<int>& devices, std::span<float> data) = 0;
    /// Blocks until every posted send has completed.
    virtual void flush() = 0;
};

/// A transfer's tag: its kind (activation 0, gradient 1), the producing stage and the microbatch.
std::uint64_t transferTag(bool gradient, int stage, int microbatch);
/// A wave push's tag (HetPipe's WSP): the sending stage and the wave; never equal to a transfer's.
std::uint64_t waveTag(int stage, int wave);

/// @brief In-process transport: one endpoint per device, threads as devices. abort() wakes every waiter with a
/// TransportError (a failed device stops the others).
class LocalFabric
{
public:
    explicit LocalFabric(int devices);
    ~LocalFabric();
    Transport& endpoint(int device);
    void abort(const std::string& why);

private:
    struct State;
    class Endpoint;
    std::shared_ptr<State> m_state;
    std::vector<std::unique_ptr<Endpoint>> m_endpoints;
};

/// @brief Gloo over TCP: a full mesh among all devices of the run for transfers, one context per all-reduce
/// group, created on first use. Rendezvous goes through `store` (the controller relays it between agents).
///
/// Gloo's TCP transport accepts the first connection on a pair's listener, whoever makes it. So every connection
/// is proven before it carries a byte of training: both ends exchange fresh nonces over it and answer with
/// HMAC-SHA256(secret, context, attempt, sender, receiver, nonces), the secret known only to the run's agents
/// (it travels in the controller's channel). A connection that fails the proof (a stranger's, garbage, replayed
/// or reflected bytes) or a pair that could not connect (a stranger took its listener) fails the attempt on every
/// device (agreed through the store), its remote address is reported to `warn`, and the rendezvous starts over
/// with new listeners and keys, at most `attempts` times; then TransportError names what went wrong.
struct GlooOptions
{
    std::string hostname = "127.0.0.1"; ///< address this device listens on (its host's, for a remote run)
    std::string iface; ///< or a network interface name (GLOO_SOCKET_IFNAME); wins over hostname when set
    std::chrono::milliseconds timeout {120000}; ///< transfers, and waiting for the other devices to arrive
    std::string prefix = "pw"; ///< keys of this run in the store
    std::vector<std::uint8_t> secret; ///< the run's key for the pairs' proofs (at least 16 bytes; required)
    int attempts = 4; ///< rendezvous attempts before giving up
    /// Per attempt, once every device is there: the pairs connected and proven within this time.
    std::chrono::milliseconds connect_timeout {5000};
    std::function<void(const std::string&)> warn; ///< a failed attempt, naming the connection (may be empty)
};
std::unique_ptr<Transport> makeGlooTransport(
    int device, int devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options);

} // namespace pw::engine
