// SPDX-License-Identifier: MIT
// The encoder's backward on the GPU. dwpe is a sum over the batch per position (elementwise.cu). dwte is a scatter:
// positions that share a token add into one row, which atomics would do in a different order every run (and in
// bf16 with a rounding per add). Instead the positions are sorted by token (CUB's stable radix sort, positions as
// values, so each token's positions stay in order), and one block per distinct token sums its positions' rows in
// fp32 and adds the sum to the row once: deterministic, and one rounding per row. Negative tokens (another rank's
// rows of a vocabulary-parallel table) add nothing.
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr int kThreads = 128;

__global__ void iotaKernel(int* out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i;
}

/// Block s handles sorted position s when it starts a run of equal tokens: the run's rows of dout, in position
/// order, summed per channel and added to dwte's row of the token.
template <class T, int N>
__global__ void __launch_bounds__(kThreads)
    tokenBackward(T* dwte, const T* dout, const int* tokens, const int* positions, int BT, int C)
{
    const int s = blockIdx.x;
    const int token = tokens[s];
    if (token < 0 || (s > 0 && tokens[s - 1] == token))
        return; // another rank's row (vocabulary-parallel), or not the first of its run: the run's first block adds it
    int end = s + 1;
    while (end < BT && tokens[end] == token)
        ++end;
    T* row = dwte + static_cast<std::size_t>(token) * C;
    for (int c = threadIdx.x * N; c < C; c += kThreads * N) {
        float acc[N] = {};
        for (int r = s; r < end; ++r) {
            float d[N];
            load<N>(dout + static_cast<std::size_t>(positions[r]) * C + c, d);
#pragma unroll
            for (int k = 0; k < N; ++k)
                acc[k] += d[k];
        }
        float w[N];
        load<N>(row + c, w);
#pragma unroll
        for (int k = 0; k < N; ++k)
            w[k] += acc[k];
        store<N>(row + c, w);
    }
}

std::size_t align256(std::size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

} // namespace

void encoderBackward(
    const Launch& l, void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C)
{
    const int BT = B * T;
    if (BT <= 0 || C <= 0)
        return;
    if (dwpe)
        positionBackward(l, dwpe, dout, B, T, C);

    // Scratch: sorted tokens, positions in and out, then CUB's temporary storage.
    std::size_t sortBytes = 0;
    PW_CUDA(cub::DeviceRadixSort::SortPairs(static_cast<void*>(nullptr), sortBytes, static_cast<const int*>(nullptr),
        static_cast<int*>(nullptr), static_cast<const int*>(nullptr), static_cast<int*>(nullptr), BT, 0,
        static_cast<int>(sizeof(int) * 8), l.stream));
    const std::size_t intBytes = align256(static_cast<std::size_t>(BT) * sizeof(int));
    auto* base = static_cast<char*>(l.scratch->get(Scratch::Sort, 3 * intBytes + align256(sortBytes)));
    auto* sortedTokens = reinterpret_cast<int*>(base);
    auto* positions = reinterpret_cast<int*>(base + intBytes);
    auto* sortedPositions = reinterpret_cast<int*>(base + 2 * intBytes);
    void* temp = base + 3 * intBytes;

    iotaKernel<<<static_cast<unsigned>(ceilDiv(BT, 256)), 256, 0, l.stream>>>(positions, BT);
    PW_CUDA_LAUNCHED();
    PW_CUDA(cub::DeviceRadixSort::SortPairs(temp, sortBytes, tokens, sortedTokens, positions, sortedPositions, BT, 0,
        static_cast<int>(sizeof(int) * 8), l.stream));

    auto run = [&](auto type) {
        using E = decltype(type);
        auto* w = static_cast<E*>(dwte);
        const auto* d = static_cast<const E*>(dout);
        if (C % 8 == 0 && aligned16(w, d))
            tokenBackward<E, 8><<<BT, kThreads, 0, l.stream>>>(w, d, sortedTokens, sortedPositions, BT, C);
        else
            tokenBackward<E, 1><<<BT, kThreads, 0, l.stream>>>(w, d, sortedTokens, sortedPositions, BT, C);
        PW_CUDA_LAUNCHED();
    };
    if (l.act == DType::BF16)
        run(bf16 {});
    else
        run(float {});
}

} // namespace pw::engine::cuda
