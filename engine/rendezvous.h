// SPDX-License-Identifier: MIT
// A run's rendezvous store as the engine's transports see it: keys set once by one device and read by the others
// (NCCL's unique id, published by device 0). The agent adapts the store the controller relays (agents/agent/
// agent.cpp's RelayStore, Gloo's Store too) to it, so that no transport library's type reaches the engine's
// headers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace pw::engine {

class Rendezvous
{
public:
    virtual ~Rendezvous() = default;
    /// Stores `value` under `key` for every device of the run.
    virtual void set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
    /// The value under `key`, waiting for it at most `timeout`; throws std::runtime_error naming the key when it
    /// does not come (or the run stops meanwhile).
    virtual std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

/// @brief The store of devices that are threads of one process (in-process runs, tests, benchmarks).
class MemoryRendezvous final : public Rendezvous
{
public:
    void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
    std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;

private:
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::map<std::string, std::vector<std::uint8_t>> m_values;
};

} // namespace pw::engine
