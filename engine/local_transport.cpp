// SPDX-License-Identifier: MIT
// LocalFabric: devices as threads of one process, exchanging host memory through mailboxes (transfers of any
// element type, byte for byte; all-reduces of fp32).
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "transport.h"

namespace pw::engine {

struct LocalFabric::State
{
    std::mutex mutex;
    std::condition_variable changed;
    std::string aborted;
    /// @brief A sent region's copy.
    struct Payload
    {
        DType dtype = DType::F32;
        std::size_t count = 0;
        std::vector<std::byte> bytes;
    };
    /// (from, to, tag) -> payloads in arrival order
    std::map<std::tuple<int, int, std::uint64_t>, std::deque<Payload>> mail;
    /// The members' parts, summed in member order once all arrived (the same bits whatever order the threads come
    /// in, as a ring all-reduce's are).
    struct Reduction
    {
        std::vector<std::vector<float>> parts; ///< by the member's place in the group
        std::vector<float> sum;
        int arrived = 0;
        int collected = 0;
    };
    /// (group, call number) -> the reduction in progress
    std::map<std::pair<std::vector<int>, long>, Reduction> reductions;
    std::map<std::pair<int, std::vector<int>>, long> calls; ///< (device, group) -> calls made
    std::map<int, std::vector<std::vector<int>>> groups; ///< device -> the groups it made

    void check()
    {
        if (!aborted.empty())
            throw TransportError("run aborted: " + aborted);
    }
};

class LocalFabric::Endpoint final : public Transport
{
public:
    Endpoint(std::shared_ptr<State> state, int device)
        : m_state(std::move(state))
        , m_device(device)
    {
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override
    {
        std::lock_guard lock(m_state->mutex);
        auto& mine = m_state->groups[m_device];
        for (const auto& g : groups)
            if (std::find(g.begin(), g.end(), m_device) != g.end())
                mine.push_back(g);
    }

    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        const auto* first = static_cast<const std::byte*>(data.data);
        State::Payload payload {data.dtype, data.count, std::vector<std::byte>(first, first + data.bytes())};
        std::lock_guard lock(m_state->mutex);
        m_state->check();
        m_state->mail[{m_device, peer, tag}].push_back(std::move(payload));
        m_state->changed.notify_all();
        return {};
    }

    /// The receive happens when it is waited for: a mailbox keeps what arrives until then.
    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        return whenWaited([this, peer, tag, data] { receive(peer, tag, data); });
    }

    Handle allReduceSum(const std::vector<int>& devices, Region region) override
    {
        const std::span<float> data = host(region);
        std::unique_lock lock(m_state->mutex);
        m_state->check();
        const auto& mine = m_state->groups[m_device];
        if (std::find(mine.begin(), mine.end(), devices) == mine.end())
            throw TransportError("device " + std::to_string(m_device)
                + ": an all-reduce in a group it did not make before the first step (makeGroups)");
        const long call = m_state->calls[{m_device, devices}]++;
        auto& r = m_state->reductions[{devices, call}];
        const auto size = static_cast<int>(devices.size());
        if (r.parts.empty())
            r.parts.resize(devices.size());
        const auto place
            = static_cast<std::size_t>(std::find(devices.begin(), devices.end(), m_device) - devices.begin());
        for (const auto& part : r.parts)
            if (!part.empty() && part.size() != data.size())
                throw TransportError("all-reduce of different sizes in one group");
        r.parts[place].assign(data.begin(), data.end());
        if (++r.arrived == size) {
            r.sum.assign(data.size(), 0.0f);
            for (const auto& part : r.parts)
                for (std::size_t i = 0; i < part.size(); ++i)
                    r.sum[i] += part[i];
            r.parts.clear();
        }
        m_state->changed.notify_all();
        m_state->changed.wait(lock, [&] { return !m_state->aborted.empty() || r.arrived == size; });
        m_state->check();
        std::copy(r.sum.begin(), r.sum.end(), data.begin());
        if (++r.collected == size)
            m_state->reductions.erase({devices, call});
        return {};
    }

    void flush() override { }
    bool reaches(const Backend&) const override { return false; }
    Completion completion() const override { return Completion::Host; }

private:
    std::span<float> host(Region r) const
    {
        if (r.dtype != DType::F32)
            throw TransportError("device " + std::to_string(m_device)
                + ": the in-process transport all-reduces fp32 host memory (stage other memory through throughHost)");
        return {static_cast<float*>(r.data), r.count};
    }

    void receive(int peer, std::uint64_t tag, Region data)
    {
        std::unique_lock lock(m_state->mutex);
        const auto key = std::make_tuple(peer, m_device, tag);
        m_state->changed.wait(lock, [&] {
            auto it = m_state->mail.find(key);
            return !m_state->aborted.empty() || (it != m_state->mail.end() && !it->second.empty());
        });
        m_state->check();
        auto& queue = m_state->mail[key];
        const State::Payload& got = queue.front();
        if (got.count != data.count || got.dtype != data.dtype)
            throw TransportError("device " + std::to_string(m_device) + " expected " + std::to_string(data.count) + " "
                + toString(data.dtype) + " elements from device " + std::to_string(peer) + ", got "
                + std::to_string(got.count) + " " + toString(got.dtype) + " elements");
        std::copy(got.bytes.begin(), got.bytes.end(), static_cast<std::byte*>(data.data));
        queue.pop_front();
    }

    std::shared_ptr<State> m_state;
    int m_device;
};

LocalFabric::LocalFabric(int devices)
    : m_state(std::make_shared<State>())
{
    for (int d = 0; d < devices; ++d)
        m_endpoints.push_back(std::make_unique<Endpoint>(m_state, d));
}

LocalFabric::~LocalFabric() = default;

Transport& LocalFabric::endpoint(int device)
{
    return *m_endpoints.at(static_cast<std::size_t>(device));
}

void LocalFabric::abort(const std::string& why)
{
    std::lock_guard lock(m_state->mutex);
    if (m_state->aborted.empty())
        m_state->aborted = why.empty() ? "aborted" : why;
    m_state->changed.notify_all();
}

} // namespace pw::engine
