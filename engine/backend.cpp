// SPDX-License-Identifier: MIT
// Buffers, the dtype names and the choice of a backend; the CPU backend is cpu_backend.cpp, CUDA's engine/cuda/.
#include "backend.h"

#include <utility>

#if PW_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace pw::engine {

std::size_t byteSize(DType t)
{
    switch (t) {
    case DType::F32:
    case DType::I32:
        return 4;
    case DType::BF16:
        return 2;
    }
    return 4;
}

const char* toString(DType t)
{
    switch (t) {
    case DType::F32:
        return "fp32";
    case DType::BF16:
        return "bf16";
    case DType::I32:
        return "int32";
    }
    return "?";
}

const char* toString(Precision p)
{
    return p == Precision::Bf16Mixed ? "bf16 mixed" : "fp32";
}

Buffer::Buffer(Backend& backend, std::size_t count, DType dtype)
    : m_backend(&backend)
    , m_count(count)
    , m_dtype(dtype)
{
    m_data = count > 0 ? backend.allocate(bytes()) : nullptr;
}

Buffer::~Buffer()
{
    reset();
}

Buffer::Buffer(Buffer&& other) noexcept
    : m_backend(std::exchange(other.m_backend, nullptr))
    , m_data(std::exchange(other.m_data, nullptr))
    , m_count(std::exchange(other.m_count, 0))
    , m_dtype(other.m_dtype)
{
}

Buffer& Buffer::operator=(Buffer&& other) noexcept
{
    if (this != &other) {
        reset();
        m_backend = std::exchange(other.m_backend, nullptr);
        m_data = std::exchange(other.m_data, nullptr);
        m_count = std::exchange(other.m_count, 0);
        m_dtype = other.m_dtype;
    }
    return *this;
}

void Buffer::reset()
{
    if (m_data && m_backend)
        m_backend->release(m_data, bytes());
    m_data = nullptr;
    m_count = 0;
}

void Buffer::ensure(Backend& backend, std::size_t count, DType dtype)
{
    if (m_backend == &backend && m_count == count && m_dtype == dtype)
        return;
    *this = Buffer(backend, count, dtype);
}

bool cudaCompiledIn()
{
#if PW_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int cudaDeviceCount()
{
#if PW_HAVE_CUDA
    return cudaVisibleDeviceCount();
#else
    return 0;
#endif
}

std::unique_ptr<Backend> makeBackend(const DeviceChoice& choice)
{
    if (!choice.cuda) {
        if (choice.precision != Precision::Fp32)
            throw std::runtime_error(
                std::string("the CPU backend trains in fp32 only, not ") + toString(choice.precision));
        return makeCpuBackend();
    }
#if PW_HAVE_CUDA
    return makeCudaBackend(*choice.cuda, choice.precision);
#else
    throw std::runtime_error("cuda:" + std::to_string(*choice.cuda)
        + " asked for, but this build has no CUDA kernels (built with PW_WITH_CUDA=OFF or without a CUDA compiler)");
#endif
}

} // namespace pw::engine
