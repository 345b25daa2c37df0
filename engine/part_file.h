// SPDX-License-Identifier: MIT
// Internal to engine/: a checkpoint file that the stages of one model write in parts, each at its known offset, from
// any process in any order (llmc.cpp's and safetensors.cpp's writers of a run's --save).
#pragma once

#include <cstddef>
#include <filesystem>

namespace pw::engine {

/// @brief The file at `path`, created when missing and never truncated, open for writing at offsets.
class PartFile
{
public:
    /// Throws std::system_error naming the file when it cannot be opened.
    explicit PartFile(const std::filesystem::path& path);
    ~PartFile();
    PartFile(const PartFile&) = delete;
    PartFile& operator=(const PartFile&) = delete;

    /// Writes `bytes` at byte `at`; throws std::system_error naming the file.
    void put(const void* data, std::size_t bytes, std::size_t at);
    /// Closes it; throws std::system_error naming the file when the last writes failed.
    void close();

private:
    std::filesystem::path m_path;
    int m_fd = -1;
};

} // namespace pw::engine
