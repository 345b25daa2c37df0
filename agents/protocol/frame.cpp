// SPDX-License-Identifier: MIT
#include "frame.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <system_error>

#include <nlohmann/json.hpp>
#include <unistd.h>

namespace pw::agents {

namespace {

constexpr std::array<std::string_view, kMessageTypeCount> kTypeNames
    = {"Hello", "RunSpec", "RendezvousSet", "RendezvousGet", "RendezvousValue", "Start", "Stop", "Resume", "Telemetry",
        "Heartbeat", "Log", "Error", "Done", "ClockProbe", "ClockReply", "FlightRecorderAsk", "FlightRecorder"};

constexpr std::array<std::uint32_t, 256> makeCrcTable()
{
    std::array<std::uint32_t, 256> table {};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    return table;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = makeCrcTable();

// Explicit byte order rather than memcpy: the wire is little-endian whatever the host is.
std::uint16_t readU16(const std::uint8_t* p)
{
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t readU32(const std::uint8_t* p)
{
    return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
}
void appendU16(std::string& out, std::uint16_t v)
{
    out.push_back(static_cast<char>(v & 0xFF));
    out.push_back(static_cast<char>(v >> 8));
}
void appendU32(std::string& out, std::uint32_t v)
{
    for (int shift = 0; shift < 32; shift += 8)
        out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

std::string hex(std::uint32_t v)
{
    char text[16];
    std::snprintf(text, sizeof text, "0x%08X", v);
    return text;
}

/// "50 57 41 58 ("PWAX")": the bytes, and as text, since stray text on the stream is the usual cause.
std::string describeBytes(const std::uint8_t* p, std::size_t n)
{
    std::string out;
    std::string text;
    for (std::size_t i = 0; i < n; ++i) {
        char byte[4];
        std::snprintf(byte, sizeof byte, "%02x", p[i]);
        out += (i ? " " : "") + std::string(byte);
        text += (p[i] >= 0x20 && p[i] < 0x7F) ? static_cast<char>(p[i]) : '.';
    }
    return out + " (\"" + text + "\")";
}

std::string frameHeader(MessageType type, std::size_t length, std::uint32_t crc)
{
    std::string out(kMagic.begin(), kMagic.end());
    appendU16(out, kProtocolVersion);
    appendU16(out, static_cast<std::uint16_t>(type));
    appendU32(out, static_cast<std::uint32_t>(length));
    appendU32(out, crc);
    return out;
}

void checkLength(MessageType type, std::size_t length)
{
    if (length > kMaxPayload)
        throw ProtocolError("cannot send a " + toString(type) + " frame of " + std::to_string(length)
            + " payload bytes: more than the limit of " + std::to_string(kMaxPayload));
}

} // namespace

std::string toString(MessageType type)
{
    const auto code = static_cast<std::uint16_t>(type);
    if (code >= 1 && code <= kMessageTypeCount)
        return std::string(kTypeNames[code - 1]);
    return "type " + std::to_string(code);
}

std::optional<MessageType> messageTypeFromCode(std::uint16_t code)
{
    if (code >= 1 && code <= kMessageTypeCount)
        return static_cast<MessageType>(code);
    return std::nullopt;
}

std::uint32_t crc32(std::span<const std::uint8_t> bytes)
{
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::uint8_t b : bytes)
        c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

std::string encodeFrame(MessageType type, const nlohmann::json& payload)
{
    const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(payload);
    checkLength(type, cbor.size());
    std::string out = frameHeader(type, cbor.size(), crc32(cbor));
    out.append(cbor.begin(), cbor.end());
    return out;
}

std::string encodeFrame(const Frame& frame)
{
    checkLength(frame.type, frame.payload.size());
    std::string out = frameHeader(frame.type, frame.payload.size(), crc32(frame.payload));
    out.append(frame.payload.begin(), frame.payload.end());
    return out;
}

// ---- FrameDecoder ----

void FrameDecoder::feed(std::span<const std::byte> bytes)
{
    const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
    m_buffer.insert(m_buffer.end(), p, p + bytes.size());
}

std::optional<Frame> FrameDecoder::next()
{
    if (m_error)
        throw ProtocolError(*m_error);
    try {
        return parse();
    } catch (const ProtocolError& e) {
        m_error = e.what();
        throw;
    }
}

std::optional<std::uint32_t> FrameDecoder::checkHeader() const
{
    const std::uint8_t* h = m_buffer.data() + m_offset;
    const std::size_t n = pending();
    if (n >= 4 && !std::equal(kMagic.begin(), kMagic.end(), h))
        throw ProtocolError("bad magic " + describeBytes(h, 4) + ", expected "
            + describeBytes(reinterpret_cast<const std::uint8_t*>(kMagic.data()), 4)
            + ": the peer is not a Pipewright agent or something else writes to the stream");
    if (n >= 6 && readU16(h + 4) != kProtocolVersion)
        throw ProtocolError("unsupported protocol version " + std::to_string(readU16(h + 4)) + " (this side speaks "
            + std::to_string(kProtocolVersion) + ")");
    if (n >= 8 && !messageTypeFromCode(readU16(h + 6)))
        throw ProtocolError("unknown message type " + std::to_string(readU16(h + 6)));
    if (n < 12)
        return std::nullopt;
    const std::uint32_t length = readU32(h + 8);
    if (length > kMaxPayload)
        throw ProtocolError(toString(static_cast<MessageType>(readU16(h + 6))) + " frame announces "
            + std::to_string(length) + " payload bytes, more than the limit of " + std::to_string(kMaxPayload));
    return length;
}

std::optional<Frame> FrameDecoder::parse()
{
    const std::optional<std::uint32_t> length = checkHeader();
    if (!length || pending() < kHeaderSize + *length)
        return std::nullopt;
    const std::uint8_t* h = m_buffer.data() + m_offset;
    Frame frame;
    frame.type = static_cast<MessageType>(readU16(h + 6));
    frame.payload.assign(h + kHeaderSize, h + kHeaderSize + *length);
    const std::uint32_t expected = readU32(h + 12);
    const std::uint32_t actual = crc32(frame.payload);
    if (expected != actual)
        throw ProtocolError("CRC mismatch in " + toString(frame.type) + " frame of " + std::to_string(*length)
            + " payload bytes: header says " + hex(expected) + ", payload has " + hex(actual));
    m_offset += kHeaderSize + *length;
    compact();
    return frame;
}

void FrameDecoder::compact()
{
    // Drop consumed bytes once they are the larger part: amortised O(1) per byte, no unbounded growth.
    if (m_offset > 0 && m_offset * 2 >= m_buffer.size()) {
        m_buffer.erase(m_buffer.begin(), m_buffer.begin() + static_cast<std::ptrdiff_t>(m_offset));
        m_offset = 0;
    }
}

void FrameDecoder::finish()
{
    if (m_error)
        throw ProtocolError(*m_error);
    if (pending() == 0)
        return;
    // A bad header in the left-over bytes is reported as what it is, not as a truncation.
    std::optional<std::uint32_t> length;
    try {
        length = checkHeader();
    } catch (const ProtocolError& e) {
        m_error = e.what();
        throw;
    }
    if (!length) {
        m_error = "stream ended inside a frame: got " + std::to_string(pending()) + " of " + std::to_string(kHeaderSize)
            + " header bytes";
    } else if (pending() >= kHeaderSize + *length) {
        throw std::logic_error("FrameDecoder::finish: whole frames remain; call next() until it returns nullopt");
    } else {
        m_error = "stream ended inside a frame: header says " + std::to_string(*length) + " payload bytes, got "
            + std::to_string(pending() - kHeaderSize);
    }
    throw ProtocolError(*m_error);
}

// ---- blocking fd I/O ----

void writeAll(int fd, std::string_view bytes)
{
    while (!bytes.empty()) {
        const ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw std::system_error(errno, std::generic_category(), "writing a frame");
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

void writeFrame(int fd, MessageType type, const nlohmann::json& payload)
{
    writeAll(fd, encodeFrame(type, payload));
}

void FrameWriter::write(MessageType type, const nlohmann::json& payload)
{
    write(encodeFrame(type, payload)); // encode outside the lock: only the write needs it
}

void FrameWriter::write(std::string_view frames)
{
    std::lock_guard lock(m_mutex);
    writeAll(m_fd, frames);
}

std::optional<Frame> FrameReader::read()
{
    std::array<std::byte, 64 * 1024> chunk;
    for (;;) {
        if (auto frame = m_decoder.next())
            return frame;
        if (m_eof)
            return std::nullopt;
        const ssize_t n = ::read(m_fd, chunk.data(), chunk.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw std::system_error(errno, std::generic_category(), "reading a frame");
        }
        if (n == 0) {
            m_eof = true;
            m_decoder.finish(); // throws when the peer stopped mid-frame
            return std::nullopt;
        }
        m_decoder.feed(std::span(chunk.data(), static_cast<std::size_t>(n)));
    }
}

} // namespace pw::agents
