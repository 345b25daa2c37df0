// SPDX-License-Identifier: MIT
// The dropped-send test hook (drop_send.h): a Transport decorator.
#include "drop_send.h"

#include <cstdlib>
#include <sstream>

#include "planner/errors.h"

namespace pw::agents {

namespace {

constexpr const char* kVariable = "PIPEWRIGHT_TEST_DROP_SEND";

class DropOneSend final : public engine::Transport
{
public:
    DropOneSend(engine::Transport& inner, const DroppedSend& send, std::function<void(const std::string&)> dropped)
        : m_inner(inner)
        , m_send(send)
        , m_tag(engine::transferTag(send.gradient, send.stage, send.microbatch))
        , m_dropped(std::move(dropped))
    {
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override { m_inner.makeGroups(groups); }
    engine::Handle send(int peer, std::uint64_t tag, engine::Region data) override
    {
        if (drops(peer, tag))
            return {};
        return m_inner.send(peer, tag, data);
    }
    engine::Handle recv(int peer, std::uint64_t tag, engine::Region data) override
    {
        return m_inner.recv(peer, tag, data);
    }
    std::vector<engine::Handle> exchange(std::span<const engine::Transfer> transfers) override
    {
        // The inner transport's own grouping for everything but the dropped send, which gets a completed handle.
        std::vector<engine::Transfer> kept;
        std::size_t skipped = transfers.size();
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const auto& t = transfers[i];
            if (skipped == transfers.size() && t.direction == engine::Transfer::Direction::Send && drops(t.peer, t.tag))
                skipped = i;
            else
                kept.push_back(t);
        }
        std::vector<engine::Handle> handles = m_inner.exchange(kept);
        if (skipped < transfers.size())
            handles.insert(handles.begin() + static_cast<std::ptrdiff_t>(skipped), engine::Handle {});
        return handles;
    }
    engine::Handle allReduceSum(const std::vector<int>& group, engine::Region data) override
    {
        return m_inner.allReduceSum(group, data);
    }
    void flush() override { m_inner.flush(); }
    bool reaches(const engine::Backend& backend) const override { return m_inner.reaches(backend); }
    Completion completion() const override { return m_inner.completion(); }

private:
    bool drops(int peer, std::uint64_t tag)
    {
        if (m_done || tag != m_tag)
            return false;
        m_done = true;
        if (m_dropped)
            m_dropped(std::string(kVariable) + ": device " + std::to_string(m_send.device) + " skips its send of "
                + (m_send.gradient ? "B" : "F") + " mb " + std::to_string(m_send.microbatch) + " (stage "
                + std::to_string(m_send.stage) + ") to device " + std::to_string(peer));
        return true;
    }

    engine::Transport& m_inner;
    DroppedSend m_send;
    std::uint64_t m_tag;
    std::function<void(const std::string&)> m_dropped;
    bool m_done = false;
};

} // namespace

std::optional<DroppedSend> droppedSendFromEnv()
{
    const char* value = std::getenv(kVariable);
    if (!value || !*value)
        return std::nullopt;
    std::istringstream in(value);
    DroppedSend d;
    char c1 = 0, c2 = 0, c3 = 0, kind = 0;
    if (!(in >> d.device >> c1 >> kind >> c2 >> d.stage >> c3 >> d.microbatch) || c1 != ':' || c2 != ':' || c3 != ':'
        || (kind != 'F' && kind != 'B') || !in.eof())
        throw planner::InputError(std::string(kVariable) + "='" + value
            + "': expected DEVICE:KIND:STAGE:MICROBATCH with KIND F (an activation) or B (a gradient), e.g. 0:F:0:3");
    d.gradient = kind == 'B';
    return d;
}

std::unique_ptr<engine::Transport> dropOneSend(
    engine::Transport& inner, const DroppedSend& send, std::function<void(const std::string&)> dropped)
{
    return std::make_unique<DropOneSend>(inner, send, std::move(dropped));
}

} // namespace pw::agents
