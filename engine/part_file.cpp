// SPDX-License-Identifier: MIT
#include "part_file.h"

#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace pw::engine {

PartFile::PartFile(const std::filesystem::path& path)
    : m_path(path)
    , m_fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644))
{
    if (m_fd < 0)
        throw std::system_error(errno, std::generic_category(), path.string() + ": cannot write the checkpoint");
}

PartFile::~PartFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

void PartFile::put(const void* data, std::size_t bytes, std::size_t at)
{
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::pwrite(m_fd, p, bytes, static_cast<off_t>(at));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::system_error(errno, std::generic_category(), m_path.string() + ": writing the checkpoint");
        p += n;
        at += static_cast<std::size_t>(n);
        bytes -= static_cast<std::size_t>(n);
    }
}

void PartFile::close()
{
    const int fd = m_fd;
    m_fd = -1;
    if (::close(fd) != 0)
        throw std::system_error(errno, std::generic_category(), m_path.string() + ": writing the checkpoint");
}

} // namespace pw::engine
