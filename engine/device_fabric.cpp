// SPDX-License-Identifier: MIT
// DeviceFabric: stages that share one GPU exchange device memory ordered by events (device_fabric.h).
#include "device_fabric.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>

namespace pw::engine {

namespace {

constexpr std::size_t kMostMembers = 16; // Backend::sum's parts on CUDA

/// A copy of a region on its owner's stream, and the event after which it holds the data.
struct Staged
{
    Buffer buffer;
    std::shared_ptr<const DeviceEvent> ready;
};

/// A staging buffer on its way back to its owner, once the streams that read it have passed `after`.
struct Returned
{
    Buffer buffer;
    std::vector<std::shared_ptr<const DeviceEvent>> after;
};

std::string describe(const Buffer& b)
{
    return std::to_string(b.count()) + " " + toString(b.dtype()) + " elements";
}

} // namespace

struct DeviceFabric::State
{
    std::mutex mutex;
    std::condition_variable changed;
    std::string aborted;
    std::vector<std::shared_ptr<Backend>> backends; ///< by device; null outside the fabric
    /// (from, to, tag) -> staged sends in the order they were posted
    std::map<std::tuple<int, int, std::uint64_t>, std::deque<Staged>> mail;
    struct Reduction
    {
        std::vector<Staged> parts; ///< by member index; empty buffer until posted
        int posted = 0;
        int summed = 0;
        std::vector<std::shared_ptr<const DeviceEvent>> done; ///< each member's sum
    };
    std::map<std::pair<std::vector<int>, long>, Reduction> reductions; ///< (group, call number)
    std::map<std::pair<int, std::vector<int>>, long> calls; ///< (device, group) -> calls made
    std::map<int, std::vector<std::vector<int>>> groups; ///< device -> the groups it made
    std::map<int, std::vector<Returned>> returns; ///< device -> its staging buffers read by other streams

    void check() const
    {
        if (!aborted.empty())
            throw TransportError("run aborted: " + aborted);
    }
};

class DeviceFabric::Endpoint final : public Transport
{
public:
    Endpoint(std::shared_ptr<State> state, int device)
        : m_state(std::move(state))
        , m_device(device)
        , m_backend(*m_state->backends[static_cast<std::size_t>(device)])
    {
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override
    {
        std::lock_guard lock(m_state->mutex);
        auto& mine = m_state->groups[m_device];
        for (const auto& g : groups) {
            if (std::find(g.begin(), g.end(), m_device) == g.end())
                continue;
            for (int d : g)
                if (!member(d))
                    throw TransportError("device " + std::to_string(m_device) + ": a collective group with device "
                        + std::to_string(d) + ", which is not on its GPU's fabric");
            mine.push_back(g);
        }
    }

    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        reclaim();
        checkPeer(peer);
        Staged s = stage(data);
        std::lock_guard lock(m_state->mutex);
        m_state->check();
        m_state->mail[{m_device, peer, tag}].push_back(std::move(s));
        m_state->changed.notify_all();
        return {};
    }

    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        checkPeer(peer);
        return whenWaited([this, peer, tag, data] { receive(peer, tag, data); });
    }

    Handle allReduceSum(const std::vector<int>& group, Region data) override
    {
        reclaim();
        const auto at = std::find(group.begin(), group.end(), m_device);
        if (at == group.end())
            throw TransportError("device " + std::to_string(m_device) + ": an all-reduce in a group without it");
        Staged part = stage(data);
        std::pair<std::vector<int>, long> key;
        {
            std::lock_guard lock(m_state->mutex);
            m_state->check();
            const auto& mine = m_state->groups[m_device];
            if (std::find(mine.begin(), mine.end(), group) == mine.end())
                throw TransportError("device " + std::to_string(m_device)
                    + ": an all-reduce in a group it did not make before the first step (makeGroups)");
            key = {group, m_state->calls[{m_device, group}]++};
            auto& r = m_state->reductions[key];
            if (r.parts.empty())
                r.parts.resize(group.size());
            for (const auto& other : r.parts)
                if (!other.buffer.empty() && (other.buffer.count() != data.count || other.buffer.dtype() != data.dtype))
                    throw TransportError("device " + std::to_string(m_device) + ": an all-reduce of "
                        + describe(part.buffer) + " where another member posted " + describe(other.buffer));
            r.parts[static_cast<std::size_t>(at - group.begin())] = std::move(part);
            ++r.posted;
            m_state->changed.notify_all();
        }
        return whenWaited([this, key = std::move(key), data] { reduce(key, data); });
    }

    void flush() override { reclaim(); }
    bool reaches(const Backend& backend) const override { return &backend == &m_backend; }
    Completion completion() const override { return Completion::Stream; }

private:
    bool member(int device) const
    {
        return device >= 0 && static_cast<std::size_t>(device) < m_state->backends.size()
            && m_state->backends[static_cast<std::size_t>(device)];
    }
    void checkPeer(int peer) const
    {
        if (!member(peer) || peer == m_device)
            throw TransportError("device " + std::to_string(m_device) + ": device " + std::to_string(peer)
                + " is not another device of its GPU's fabric");
    }

    /// A copy of `data` on this device's stream.
    Staged stage(Region data)
    {
        Staged s;
        s.buffer = Buffer(m_backend, data.count, data.dtype);
        m_backend.copy(s.buffer.data(), data.data, data.bytes());
        s.ready = m_backend.record();
        return s;
    }

    /// Gives this device's staging buffers that other streams have read back to its arena, ordered after the reads.
    void reclaim()
    {
        std::vector<Returned> back;
        {
            std::lock_guard lock(m_state->mutex);
            back.swap(m_state->returns[m_device]);
        }
        for (auto& r : back)
            for (const auto& e : r.after)
                m_backend.waitFor(*e);
        back.clear(); // released here, on the owner's thread: their next users come after the waits on its stream
    }

    void receive(int peer, std::uint64_t tag, Region data)
    {
        Staged s;
        {
            std::unique_lock lock(m_state->mutex);
            const auto key = std::make_tuple(peer, m_device, tag);
            m_state->changed.wait(lock, [&] {
                auto it = m_state->mail.find(key);
                return !m_state->aborted.empty() || (it != m_state->mail.end() && !it->second.empty());
            });
            m_state->check();
            auto& queue = m_state->mail[key];
            s = std::move(queue.front());
            queue.pop_front();
        }
        if (s.buffer.count() != data.count || s.buffer.dtype() != data.dtype) {
            const std::string got = describe(s.buffer);
            giveBack(peer, std::move(s.buffer), {});
            throw TransportError("device " + std::to_string(m_device) + " expected " + std::to_string(data.count) + " "
                + toString(data.dtype) + " elements from device " + std::to_string(peer) + ", got " + got);
        }
        m_backend.waitFor(*s.ready);
        m_backend.copy(data.data, s.buffer.data(), data.bytes());
        giveBack(peer, std::move(s.buffer), {m_backend.record()});
    }

    void reduce(const std::pair<std::vector<int>, long>& key, Region data)
    {
        std::vector<const void*> parts;
        std::vector<std::shared_ptr<const DeviceEvent>> ready;
        {
            std::unique_lock lock(m_state->mutex);
            auto& r = m_state->reductions.at(key);
            const auto size = static_cast<int>(key.first.size());
            m_state->changed.wait(lock, [&] { return !m_state->aborted.empty() || r.posted == size; });
            m_state->check();
            for (const auto& p : r.parts) {
                parts.push_back(p.buffer.data());
                ready.push_back(p.ready);
            }
        }
        for (const auto& e : ready)
            m_backend.waitFor(*e);
        m_backend.sum(data.data, parts, data.count);
        auto done = m_backend.record();
        std::lock_guard lock(m_state->mutex);
        auto it = m_state->reductions.find(key);
        auto& r = it->second;
        r.done.push_back(std::move(done));
        if (++r.summed < static_cast<int>(key.first.size()))
            return;
        for (std::size_t i = 0; i < r.parts.size(); ++i)
            m_state->returns[key.first[i]].push_back({std::move(r.parts[i].buffer), r.done});
        m_state->reductions.erase(it);
    }

    void giveBack(int owner, Buffer buffer, std::vector<std::shared_ptr<const DeviceEvent>> after)
    {
        std::lock_guard lock(m_state->mutex);
        m_state->returns[owner].push_back({std::move(buffer), std::move(after)});
    }

    std::shared_ptr<State> m_state;
    int m_device;
    Backend& m_backend;
};

DeviceFabric::DeviceFabric(std::vector<std::shared_ptr<Backend>> backends)
    : m_state(std::make_shared<State>())
{
    const Backend* first = nullptr;
    int firstDevice = -1;
    std::size_t members = 0;
    for (std::size_t d = 0; d < backends.size(); ++d) {
        if (!backends[d])
            continue;
        ++members;
        if (!first) {
            first = backends[d].get();
            firstDevice = static_cast<int>(d);
        } else if (!first->sharesMemoryWith(*backends[d]) || !backends[d]->sharesMemoryWith(*first))
            throw std::invalid_argument("device fabric: device " + std::to_string(d) + " (" + backends[d]->name()
                + ") does not share memory with device " + std::to_string(firstDevice) + " (" + first->name() + ")");
    }
    if (members > kMostMembers && !first->hostAddressable())
        throw std::invalid_argument("device fabric: " + std::to_string(members) + " devices share one GPU; at most "
            + std::to_string(kMostMembers) + " can");
    m_state->backends = std::move(backends);
    m_endpoints.resize(m_state->backends.size());
    for (std::size_t d = 0; d < m_state->backends.size(); ++d)
        if (m_state->backends[d])
            m_endpoints[d] = std::make_unique<Endpoint>(m_state, static_cast<int>(d));
}

DeviceFabric::~DeviceFabric()
{
    // Every stream that might still read a staging buffer is done before any goes back to its arena.
    for (const auto& b : m_state->backends)
        if (b) {
            try {
                b->synchronize();
            } catch (...) { // a failed device: its buffers are released all the same
            }
        }
    m_state->mail.clear();
    m_state->reductions.clear();
    m_state->returns.clear();
}

Transport& DeviceFabric::endpoint(int device)
{
    if (device < 0 || static_cast<std::size_t>(device) >= m_endpoints.size()
        || !m_endpoints[static_cast<std::size_t>(device)])
        throw std::out_of_range("device " + std::to_string(device) + " is not on this device fabric");
    return *m_endpoints[static_cast<std::size_t>(device)];
}

std::vector<int> DeviceFabric::devices() const
{
    std::vector<int> out;
    for (std::size_t d = 0; d < m_endpoints.size(); ++d)
        if (m_endpoints[d])
            out.push_back(static_cast<int>(d));
    return out;
}

void DeviceFabric::abort(const std::string& why)
{
    std::lock_guard lock(m_state->mutex);
    if (m_state->aborted.empty())
        m_state->aborted = why.empty() ? "aborted" : why;
    m_state->changed.notify_all();
}

namespace {

class LinkedTransport final : public Transport
{
public:
    LinkedTransport(Transport& fabric, std::vector<int> local, Transport& remote)
        : m_fabric(fabric)
        , m_local(local.begin(), local.end())
        , m_remote(remote)
    {
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override
    {
        std::vector<std::vector<int>> local;
        for (const auto& g : groups)
            if (isLocal(g))
                local.push_back(g);
        m_fabric.makeGroups(local);
        m_remote.makeGroups(groups);
    }
    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        return (m_local.count(peer) ? m_fabric : m_remote).send(peer, tag, data);
    }
    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        return (m_local.count(peer) ? m_fabric : m_remote).recv(peer, tag, data);
    }
    std::vector<Handle> exchange(std::span<const Transfer> transfers) override
    {
        std::vector<Transfer> parts[2];
        std::vector<std::size_t> where[2];
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const int side = m_local.count(transfers[i].peer) ? 0 : 1;
            parts[side].push_back(transfers[i]);
            where[side].push_back(i);
        }
        std::vector<Handle> handles(transfers.size());
        for (int side : {1, 0}) { // the remote's first: its peers may be waiting on it
            if (parts[side].empty())
                continue;
            auto posted = (side == 0 ? m_fabric : m_remote).exchange(parts[side]);
            for (std::size_t k = 0; k < posted.size(); ++k)
                handles[where[side][k]] = std::move(posted[k]);
        }
        return handles;
    }
    Handle allReduceSum(const std::vector<int>& group, Region data) override
    {
        return (isLocal(group) ? m_fabric : m_remote).allReduceSum(group, data);
    }
    void flush() override
    {
        m_fabric.flush();
        m_remote.flush();
    }
    bool reaches(const Backend& backend) const override
    {
        return m_fabric.reaches(backend) && m_remote.reaches(backend);
    }
    Completion completion() const override
    {
        return m_fabric.completion() == Completion::Stream || m_remote.completion() == Completion::Stream
            ? Completion::Stream
            : Completion::Host;
    }

private:
    bool isLocal(const std::vector<int>& group) const
    {
        return std::all_of(group.begin(), group.end(), [&](int d) { return m_local.count(d) > 0; });
    }

    Transport& m_fabric;
    std::set<int> m_local;
    Transport& m_remote;
};

} // namespace

std::unique_ptr<Transport> linkTransports(Transport& fabric, std::vector<int> local, Transport& remote)
{
    return std::make_unique<LinkedTransport>(fabric, std::move(local), remote);
}

} // namespace pw::engine
