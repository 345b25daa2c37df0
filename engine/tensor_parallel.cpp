// SPDX-License-Identifier: MIT
#include "tensor_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "transport.h"

namespace pw::engine {

int TensorShare::holders(int t) const
{
    if (split == TensorSplit::Whole)
        return t;
    return split == TensorSplit::Rows && row_units > 0 && row_units < t ? t / row_units : 1;
}

std::vector<std::pair<std::size_t, std::size_t>> shardRanges(
    std::span<const std::size_t> shape, const TensorShare& share, const TensorParallel& tp)
{
    const std::size_t rows = shape.empty() ? 0 : shape[0];
    const std::size_t cols = shape.size() > 1 ? shape[1] : 1;
    const auto t = static_cast<std::size_t>(std::max(1, tp.ranks));
    const auto r = static_cast<std::size_t>(tp.rank);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (share.split == TensorSplit::Whole || t == 1) {
        out.emplace_back(0, rows * cols);
        return out;
    }
    if (share.split == TensorSplit::Rows) {
        const auto blocks = static_cast<std::size_t>(std::max(1, share.row_blocks));
        const std::size_t block = rows / blocks;
        const std::size_t units = share.row_units > 0 ? static_cast<std::size_t>(share.row_units) : block;
        const bool divides = units >= t ? units % t == 0 : t % units == 0;
        if (block * blocks != rows || block % units != 0 || !divides)
            throw std::invalid_argument("a tensor of " + std::to_string(rows) + " rows in " + std::to_string(blocks)
                + " blocks of " + std::to_string(units) + " units does not split over " + std::to_string(t) + " ranks");
        // Each rank's rows of a block: its 1/t of the units, or the one unit it shares with t / units - 1 others.
        const std::size_t part = units >= t ? block / t : block / units;
        const std::size_t at = units >= t ? r * part : r * units / t * part;
        for (std::size_t k = 0; k < blocks; ++k)
            out.emplace_back((k * block + at) * cols, (k * block + at + part) * cols);
        return out;
    }
    if (cols % t != 0)
        throw std::invalid_argument(
            "a tensor of " + std::to_string(cols) + " columns does not split over " + std::to_string(t) + " ranks");
    const std::size_t part = cols / t;
    for (std::size_t i = 0; i < rows; ++i)
        out.emplace_back(i * cols + r * part, i * cols + (r + 1) * part);
    return out;
}

namespace {

/// The group's collectives composed from the transport's all-reduce, which every transport has: an all-gather is
/// the sum of parts placed in zeros (x + 0 is exact), a reduce-scatter the sum's rank-th part. It moves t/2 times
/// the bytes of the native collectives (noted in docs/execution.md).
class TransportGroup final : public TensorGroup
{
public:
    TransportGroup(Transport& transport, Backend& backend, std::vector<int> devices, int rank)
        : m_transport(transport)
        , m_backend(backend)
        , m_devices(std::move(devices))
        , m_rank(rank)
    {
    }

    void allReduce(void* data, DType dtype, std::size_t n) override
    {
        m_transport.allReduceSum(m_devices, {data, dtype, n}).wait();
    }

    void allGather(void* whole, const void* part, DType dtype, std::size_t n) override
    {
        const std::size_t bytes = n * byteSize(dtype);
        auto* w = static_cast<std::byte*>(whole);
        m_backend.zero(whole, bytes * m_devices.size());
        m_backend.copy(w + static_cast<std::size_t>(m_rank) * bytes, part, bytes);
        allReduce(whole, dtype, n * m_devices.size());
    }

    void reduceScatter(void* part, const void* whole, DType dtype, std::size_t n) override
    {
        const std::size_t bytes = n * byteSize(dtype);
        m_scratch.ensure(m_backend, n * m_devices.size(), dtype);
        m_backend.copy(m_scratch.data(), whole, m_scratch.bytes());
        allReduce(m_scratch.data(), dtype, m_scratch.count());
        m_backend.copy(part, m_scratch.as<std::byte>() + static_cast<std::size_t>(m_rank) * bytes, bytes);
    }

private:
    Transport& m_transport;
    Backend& m_backend;
    std::vector<int> m_devices; ///< ascending, as the transport's groups are named
    int m_rank;
    Buffer m_scratch;
};

} // namespace

std::unique_ptr<TensorGroup> transportGroup(Transport& transport, Backend& backend, std::vector<int> devices, int rank)
{
    std::sort(devices.begin(), devices.end());
    return std::make_unique<TransportGroup>(transport, backend, std::move(devices), rank);
}

} // namespace pw::engine
