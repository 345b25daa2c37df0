// SPDX-License-Identifier: MIT
// The Gloo transport (Debian's libgloo): processes over TCP, host memory (transfers of any element type, all-reduces
// of fp32; engine/transport.h). Its options and its factory are the only place Gloo's types meet the engine's
// interface.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace gloo::rendezvous {
class Store;
}

namespace pw::engine {

/// @brief Gloo over TCP: a full mesh among the devices of the run for transfers, and a context per collective group
/// (made up front by makeGroups). Rendezvous goes through `store` (the controller relays it between agents).
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
/// Device `device` among the run's `devices` (ascending; the plan's, which may leave some of its cluster's out):
/// the mesh has a rank per device of the list, so a device that is not in it is never waited for.
std::unique_ptr<Transport> makeGlooTransport(
    int device, std::vector<int> devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options);
/// The same among devices 0 to `devices` - 1.
std::unique_ptr<Transport> makeGlooTransport(
    int device, int devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options);

} // namespace pw::engine
