// SPDX-License-Identifier: MIT
// Framing of the controller <-> agent protocol: a fixed little-endian header, then a CBOR payload.
//
//   offset  size  field
//        0     4  magic "PWAG"
//        4     2  protocol version (kProtocolVersion)
//        6     2  message type (MessageType)
//        8     4  payload length in bytes (at most kMaxPayload)
//       12     4  CRC-32 of the payload (reflected, polynomial 0xEDB88320, as zlib and Ethernet)
//       16     N  payload (CBOR; messages.h gives it meaning)
//
// The frame layer knows the message types (to reject unknown ones before reading their payload) but not their
// fields. A stream that fails to decode cannot be resynchronised: the peer is out of step or something else writes
// to the stream, so every error here ends the connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pw::agents {

/// The first four bytes of every frame.
inline constexpr std::array<char, 4> kMagic = {'P', 'W', 'A', 'G'};
/// The version this build speaks; a frame of another version is refused (no negotiation). 2: RunSpec carries the
/// run's Gloo key (`gloo_secret`), and agents prove every Gloo connection with it: a version 1 agent would connect
/// without, and its peers refuse that. 3: Hello describes the agent's CUDA and each GPU (a map per GPU, no longer
/// a name), and RunSpec says which CUDA device each of the agent's devices trains on and in what precision.
/// 4: ClockProbe and ClockReply. 5: Heartbeat says what each device is doing now (DeviceProgress), and the
/// controller asks for an agent's flight recorder (FlightRecorderAsk, answered by FlightRecorder); RunSpec's
/// steps, data, checkpoints and optimizer settings move into one map, `training` (TrainingOptions). 6: spans,
/// progress and plans carry the zero-bubble action kinds (BackwardInput, the last kind; BackwardWeight), which a
/// version 5 peer refuses. 7: the tied embedding's gradient is summed in an AllReduce action of its own before the
/// step, replica j of the embedding's stage with replica j of the head's (planner CollectivePurpose::TiedWeights);
/// a version 6 agent sums it inside the step over every device of both stages, so the two would wait on different
/// groups.
inline constexpr std::uint16_t kProtocolVersion = 7;
/// The largest payload a frame may announce: a corrupt length must not make the reader allocate gigabytes.
inline constexpr std::uint32_t kMaxPayload = 64u << 20;
inline constexpr std::size_t kHeaderSize = 16;

/// @brief The type tag of a frame. The numbers are the wire format: never renumber, only add at the end (and
/// raise kProtocolVersion when an old peer could not ignore the new type). 0 is never valid, so that a zeroed
/// header is caught.
enum class MessageType : std::uint16_t {
    Hello = 1,
    RunSpec,
    RendezvousSet,
    RendezvousGet,
    RendezvousValue,
    Start,
    Stop,
    Resume,
    Telemetry,
    Heartbeat,
    Log,
    Error,
    Done,
    ClockProbe,
    ClockReply,
    FlightRecorderAsk,
    FlightRecorder,
};
/// The number of message types; valid codes are 1..kMessageTypeCount.
inline constexpr std::uint16_t kMessageTypeCount = static_cast<std::uint16_t>(MessageType::FlightRecorder);

/// "Hello", "RunSpec", ...; "type N" for a code that is no MessageType.
std::string toString(MessageType type);
/// The MessageType with wire code `code`, or nullopt.
std::optional<MessageType> messageTypeFromCode(std::uint16_t code);

/// @brief Anything wrong with the bytes or the messages a peer sent. what() says what and where, e.g.
/// "RunSpec: field 'lr': expected a number, got string".
class ProtocolError : public std::runtime_error
{
public:
    using std::runtime_error::runtime_error;
};

/// @brief One decoded frame: its type and its (CRC-checked) CBOR payload, not yet interpreted.
struct Frame
{
    MessageType type = MessageType::Hello;
    std::vector<std::uint8_t> payload;

    bool operator==(const Frame&) const = default;
};

/// CRC-32 (reflected, 0xEDB88320, initial and final XOR 0xFFFFFFFF): crc32("123456789") == 0xCBF43926.
std::uint32_t crc32(std::span<const std::uint8_t> bytes);

/// The bytes of a frame carrying `payload` as CBOR. Throws ProtocolError when the payload exceeds kMaxPayload.
std::string encodeFrame(MessageType type, const nlohmann::json& payload);
/// The bytes of `frame` as it is (its payload is not checked to be CBOR): decoder's inverse, for tests and tools.
std::string encodeFrame(const Frame& frame);

/// @brief Cuts a byte stream into frames, however the stream arrives: any split of the same bytes into feed()
/// calls gives the same frames and the same error at the same place.
///
/// Header fields are checked as soon as their bytes are there (a wrong magic fails on the first four bytes, not
/// after waiting for sixteen), the CRC once the whole payload is. After a ProtocolError the decoder stays failed:
/// every later next() or finish() throws the same error.
class FrameDecoder
{
public:
    /// Appends bytes to the stream. Never throws ProtocolError: checking happens in next().
    void feed(std::span<const std::byte> bytes);
    void feed(std::string_view bytes) { feed(std::as_bytes(std::span(bytes.data(), bytes.size()))); }
    /// The next whole frame, or nullopt when more bytes are needed. Throws ProtocolError for a bad frame.
    std::optional<Frame> next();
    /// Declares the end of the stream. Throws ProtocolError when bytes remain that are not a whole frame (the peer
    /// died mid-frame); call next() until nullopt first (left-over whole frames are a caller's bug: logic_error).
    void finish();
    /// Bytes fed but not yet returned as frames.
    std::size_t pending() const { return m_buffer.size() - m_offset; }

private:
    std::optional<Frame> parse();
    /// Checks the header fields of the pending bytes that are complete; returns the payload length once known.
    std::optional<std::uint32_t> checkHeader() const;
    void compact();

    std::vector<std::uint8_t> m_buffer;
    std::size_t m_offset = 0; ///< start of the first frame not yet returned
    std::optional<std::string> m_error; ///< set by the first ProtocolError: the stream is lost from there on
};

/// Writes all of `bytes` to a blocking fd, retrying on EINTR and partial writes. Throws std::system_error (EPIPE
/// when the peer is gone: callers ignore SIGPIPE so that this surfaces as an error, not a dead process).
void writeAll(int fd, std::string_view bytes);
/// Encodes and writes one frame. Not safe for concurrent calls on one fd (frames could interleave): use FrameWriter.
void writeFrame(int fd, MessageType type, const nlohmann::json& payload);

/// @brief Writes whole frames to a blocking fd from any number of threads (a mutex keeps each frame contiguous:
/// writes beyond PIPE_BUF bytes are not atomic). Does not own the fd.
class FrameWriter
{
public:
    explicit FrameWriter(int fd)
        : m_fd(fd)
    {
    }
    void write(MessageType type, const nlohmann::json& payload);
    /// Writes bytes that are already whole frames (encodeFrame, encode(Message)).
    void write(std::string_view frames);

private:
    int m_fd;
    std::mutex m_mutex;
};

/// @brief Reads frames from a blocking fd (one reader thread). Does not own the fd.
class FrameReader
{
public:
    explicit FrameReader(int fd)
        : m_fd(fd)
    {
    }
    /// Blocks for the next frame; nullopt at a clean end of stream (EOF between frames). Throws ProtocolError for
    /// a bad or truncated stream, std::system_error when read(2) fails.
    std::optional<Frame> read();

private:
    int m_fd;
    FrameDecoder m_decoder;
    bool m_eof = false;
};

} // namespace pw::agents
