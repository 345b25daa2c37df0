// SPDX-License-Identifier: MIT
// The typed messages of the controller <-> agent protocol. Each is a struct with its wire type (kType) and its
// payload as JSON (toJson / fromJson), sent as CBOR in a frame (frame.h). A session:
//
//   agent -> controller   Hello                        (first frame: what the agent is and can do)
//   controller -> agent   RunSpec, then Start          (what to run)
//   both ways             RendezvousSet/Get/Value      (the controller relays Gloo's key/value store)
//   agent -> controller   Telemetry, Heartbeat, Log, Error, Done
//   controller -> agent   Stop, Resume                 (Resume: resend journaled telemetry after a reconnect)
//   controller -> agent   ClockProbe, answered at once by ClockReply (the agent host's clock against the controller's)
//   controller -> agent   FlightRecorderAsk, answered at once by FlightRecorder (each device's last actions)
//
// fromJson ignores fields it does not know (a newer peer of the same protocol version may add some) and throws
// ProtocolError naming the message and the field for a missing or ill-typed one.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "frame.h"
#include "planner/timeline.h"

namespace pw::agents {

/// @brief One GPU an agent sees, in CUDA's order (CUDA_VISIBLE_DEVICES applied: `index` is among the visible).
struct GpuCapability
{
    int index = 0;
    std::string name; ///< "NVIDIA H100 80GB HBM3"
    std::int64_t memory_bytes = 0; ///< total
    std::int64_t free_bytes = 0; ///< free when the agent started; -1: unknown
    int cc_major = 0; ///< compute capability major.minor
    int cc_minor = 0;

    bool operator==(const GpuCapability&) const = default;
};

/// @brief An agent's CUDA: its build, the libraries it found, and what its kernels were built for.
struct CudaCapability
{
    bool compiled_in = false; ///< the agent's engine holds CUDA kernels
    std::string runtime; ///< "13.0"; empty when not compiled in
    std::string driver; ///< the CUDA version the driver supports, "13.0"; "none" without a driver
    std::string cublas; ///< "13.1.0"
    std::string nccl; ///< "2.28.9", or "not found"
    std::vector<int> architectures; ///< SM architectures of the kernels, {80, 90}
    std::string error; ///< why no GPU is listed (no driver, no device visible, no kernels), when none is

    /// Whether the kernels run on a GPU of compute capability major.minor: built for an architecture of the same
    /// major at or below it (the same binary code), or the GPU is newer than every architecture (CMake embeds
    /// each one's PTX, which the driver compiles when the agent starts). Older than every architecture: no.
    bool runsOn(int cc_major, int cc_minor) const;

    bool operator==(const CudaCapability&) const = default;
};

/// @brief Agent -> controller, the first frame: who the agent is and what it can run.
struct Hello
{
    static constexpr MessageType kType = MessageType::Hello;
    int protocol_version = kProtocolVersion;
    std::string agent_version;
    std::string host;
    std::int64_t pid = 0;
    int cores = 0;
    std::int64_t memory_bytes = 0;
    /// "cpu", "gloo", and "cuda" when the agent was built with CUDA and sees a device
    std::vector<std::string> backends;
    std::vector<GpuCapability> gpus; ///< in CUDA's order; empty without CUDA
    std::string blas; ///< the BLAS the engine was built with, e.g. "OpenBLAS 0.3.21"
    CudaCapability cuda;

    nlohmann::json toJson() const;
    static Hello fromJson(const nlohmann::json& j);
    bool operator==(const Hello&) const = default;
};

/// Where a run's training data comes from.
enum class DataKind : std::uint8_t { Synthetic, Tokens, Text };
std::string_view toString(DataKind kind);

/// What a GPU device trains in: fp32 throughout, or bf16 parameters, gradients and activations with fp32 master
/// weights and moments (engine::Precision). A CPU device trains in fp32.
enum class Precision : std::uint8_t { Fp32, Bf16 };
std::string_view toString(Precision precision);

/// How the agents' devices talk to each other: Gloo over TCP (host memory; GPUs staged through it), in-process
/// (one agent holds every device), or NCCL between the devices' GPUs (every device of the plan on a GPU of its
/// own; protocol version 5).
enum class Transport : std::uint8_t { Gloo, Local, Nccl };
std::string_view toString(Transport transport);

/// @brief A run's training data.
struct DataSpec
{
    DataKind kind = DataKind::Synthetic;
    std::string path; ///< tokens/text file (empty for synthetic data)
    std::uint64_t seed = 0;

    bool operator==(const DataSpec&) const = default;
};

/// @brief What a run trains, and with which optimizer settings: the one copy that travels from the CLI or the
/// desktop app (app::RunRequest) to every agent (RunSpec), where it becomes the engine's AdamWOptions. It lives in
/// the protocol because that is the lowest layer both sides always build (the controller may be built without the
/// engine).
struct TrainingOptions
{
    int steps = 20; ///< optimizer steps
    DataSpec data;
    std::string init_checkpoint; ///< llm.c checkpoint to start from; empty: initialise from the seed
    std::string save_checkpoint; ///< where the trained model goes as an llm.c checkpoint; empty: save none
    double lr = 3e-4; ///< AdamW's learning rate (the peak, after the warm-up)
    double weight_decay = 0.0; ///< AdamW's decoupled weight decay
    int warmup_steps = 0; ///< linear warm-up steps
    bool cosine = false; ///< cosine decay after the warm-up (else constant)
    std::uint64_t seed = 1234; ///< the weights' initialisation (and, where the caller says so, the data's)

    bool operator==(const TrainingOptions&) const = default;
};

/// @brief Controller -> agent: the run this agent takes part in.
struct RunSpec
{
    static constexpr MessageType kType = MessageType::RunSpec;
    std::string run_id;
    std::string agent; ///< the name the controller gives this agent; Telemetry::agent repeats it
    nlohmann::json plan; ///< the plan file, as planner's toJson(Plan) writes it
    std::vector<int> devices; ///< the plan's global device indices this agent runs
    /// Per entry of `devices`: the CUDA device it trains on (an index among those the agent sees, i.e. after its
    /// CUDA_VISIBLE_DEVICES), or -1 for the CPU. Empty: every device on the CPU.
    std::vector<int> cuda_devices;
    Precision precision = Precision::Fp32; ///< of the CUDA devices (CPU devices train in fp32)
    TrainingOptions training; ///< as the user asked (app::RunRequest::training)
    int threads = 0; ///< CPU threads (0: the agent's choice)
    std::string journal_path; ///< where the agent journals telemetry for Resume
    Transport transport = Transport::Gloo;
    int telemetry_batch = 64; ///< spans per Telemetry message
    std::string gloo_host; ///< address Gloo listens on (the agent's host as its peers reach it); empty: 127.0.0.1
    /// The run's key for proving Gloo connections (random per run; travels only in this channel, never logged or
    /// stored). Required for the Gloo transport: an agent refuses a Gloo run without one.
    std::vector<std::uint8_t> gloo_secret;

    nlohmann::json toJson() const;
    static RunSpec fromJson(const nlohmann::json& j);
    bool operator==(const RunSpec&) const = default;
};

/// @brief Agent -> controller: store `value` under `key` in the run's rendezvous store (Gloo's key/value store,
/// relayed by the controller so that agents open no ports of ours).
struct RendezvousSet
{
    static constexpr MessageType kType = MessageType::RendezvousSet;
    std::string key;
    std::vector<std::uint8_t> value; ///< opaque bytes (CBOR byte string)

    nlohmann::json toJson() const;
    static RendezvousSet fromJson(const nlohmann::json& j);
    bool operator==(const RendezvousSet&) const = default;
};

/// @brief Agent -> controller: ask for `key`; the controller answers with RendezvousValue once it is set.
struct RendezvousGet
{
    static constexpr MessageType kType = MessageType::RendezvousGet;
    std::string key;

    nlohmann::json toJson() const;
    static RendezvousGet fromJson(const nlohmann::json& j);
    bool operator==(const RendezvousGet&) const = default;
};

/// @brief Controller -> agent: the value of a key asked for with RendezvousGet.
struct RendezvousValue
{
    static constexpr MessageType kType = MessageType::RendezvousValue;
    std::string key;
    std::vector<std::uint8_t> value;

    nlohmann::json toJson() const;
    static RendezvousValue fromJson(const nlohmann::json& j);
    bool operator==(const RendezvousValue&) const = default;
};

/// @brief Controller -> agent: begin executing the RunSpec.
struct Start
{
    static constexpr MessageType kType = MessageType::Start;

    nlohmann::json toJson() const;
    static Start fromJson(const nlohmann::json& j);
    bool operator==(const Start&) const = default;
};

/// @brief Controller -> agent: stop the run (the agent answers with Done{stopped}).
struct Stop
{
    static constexpr MessageType kType = MessageType::Stop;
    std::string reason;

    nlohmann::json toJson() const;
    static Stop fromJson(const nlohmann::json& j);
    bool operator==(const Stop&) const = default;
};

/// @brief Controller -> agent after a reconnect: resend the journaled Telemetry with seq > from_seq.
struct Resume
{
    static constexpr MessageType kType = MessageType::Resume;
    std::int64_t from_seq = 0;

    nlohmann::json toJson() const;
    static Resume fromJson(const nlohmann::json& j);
    bool operator==(const Resume&) const = default;
};

/// @brief One measured value: loss, throughput, memory in use ("memory", bytes), ...
struct Metric
{
    std::int64_t step = 0;
    std::string name;
    double value = 0;
    double t_s = 0; ///< seconds from the run's t = 0, on the agent's clock
    std::int32_t device = -1; ///< -1: not tied to a device

    bool operator==(const Metric&) const = default;
};

/// @brief Agent -> controller: a batch of spans and metrics. Spans travel as arrays of 11 numbers
/// [device, lane, kind, stage, microbatch, action, t0, t1, peer, weight_version, bytes] (lane and kind as their
/// enum values): a batch holds thousands, so field names would be most of its bytes.
struct Telemetry
{
    static constexpr MessageType kType = MessageType::Telemetry;
    std::string agent;
    std::int64_t seq = 1; ///< per agent, from 1, no gaps: what Resume counts
    /// The sequence number of spans[0]: an agent numbers its spans from 1 without gaps across batches, so that
    /// (agent, span number) names a span for the history (a resent batch stores nothing twice).
    std::int64_t first_span = 1;
    std::vector<planner::Span> spans;
    std::vector<Metric> metrics;

    nlohmann::json toJson() const;
    static Telemetry fromJson(const nlohmann::json& j);
    bool operator==(const Telemetry&) const = default;
};

/// @brief What one device of an agent is doing now: how many actions it has finished, and the action it is in (a
/// span that has begun and not ended: t0 = when it began on the agent's clock, t1 = 0). What the controller's stall
/// report follows from device to device (a receive waits on its peer).
struct DeviceProgress
{
    std::int32_t device = 0;
    std::int64_t finished = 0; ///< actions finished so far
    bool busy = false; ///< in `action` now; false: between actions (or not started, or done)
    planner::Span action;

    bool operator==(const DeviceProgress&) const = default;
};

/// @brief Agent -> controller, periodically: still alive, at this step, and each device's progress.
struct Heartbeat
{
    static constexpr MessageType kType = MessageType::Heartbeat;
    double t_s = 0;
    std::int64_t step = 0;
    std::vector<DeviceProgress> devices; ///< one per device of the agent, once it trains

    nlohmann::json toJson() const;
    static Heartbeat fromJson(const nlohmann::json& j);
    bool operator==(const Heartbeat&) const = default;
};

/// @brief Controller -> agent: what time is it on your clock? `id` and `controller_t_s` (the controller's monotonic
/// clock when it sent the probe) come back in the reply, so the controller needs to remember nothing.
struct ClockProbe
{
    static constexpr MessageType kType = MessageType::ClockProbe;
    std::int64_t id = 0;
    double controller_t_s = 0;

    nlohmann::json toJson() const;
    static ClockProbe fromJson(const nlohmann::json& j);
    bool operator==(const ClockProbe&) const = default;
};

/// @brief Agent -> controller, at once on a ClockProbe: the probe's fields and the agent host's monotonic clock when
/// it answered (the clock its spans are stamped with).
struct ClockReply
{
    static constexpr MessageType kType = MessageType::ClockReply;
    std::int64_t id = 0;
    double controller_t_s = 0;
    double agent_t_s = 0;

    nlohmann::json toJson() const;
    static ClockReply fromJson(const nlohmann::json& j);
    bool operator==(const ClockReply&) const = default;
};

/// @brief Controller -> agent: send your flight recorder now (a run stalled: the controller stores every agent's).
struct FlightRecorderAsk
{
    static constexpr MessageType kType = MessageType::FlightRecorderAsk;
    std::string reason;

    nlohmann::json toJson() const;
    static FlightRecorderAsk fromJson(const nlohmann::json& j);
    bool operator==(const FlightRecorderAsk&) const = default;
};

/// The actions an agent's flight recorder keeps per device.
inline constexpr std::size_t kFlightRecorderActions = 256;

/// @brief Agent -> controller, at once on a FlightRecorderAsk: each device's last kFlightRecorderActions actions
/// (spans, on the agent's clock, by device then start), an action still in progress last with t1 = 0. Spans travel
/// as Telemetry's arrays.
struct FlightRecorder
{
    static constexpr MessageType kType = MessageType::FlightRecorder;
    std::string agent;
    double t_s = 0; ///< the agent's clock when it answered
    std::vector<planner::Span> actions;

    nlohmann::json toJson() const;
    static FlightRecorder fromJson(const nlohmann::json& j);
    bool operator==(const FlightRecorder&) const = default;
};

enum class LogLevel : std::uint8_t { Debug, Info, Warning, Error };
std::string_view toString(LogLevel level);

/// @brief Agent -> controller: a line for the run's log.
struct Log
{
    static constexpr MessageType kType = MessageType::Log;
    LogLevel level = LogLevel::Info;
    std::string text;
    double t_s = 0;

    nlohmann::json toJson() const;
    static Log fromJson(const nlohmann::json& j);
    bool operator==(const Log&) const = default;
};

/// @brief Either way: something went wrong; `fatal` means the sender is ending the run.
struct Error
{
    static constexpr MessageType kType = MessageType::Error;
    std::string message;
    bool fatal = false;

    nlohmann::json toJson() const;
    static Error fromJson(const nlohmann::json& j);
    bool operator==(const Error&) const = default;
};

enum class DoneStatus : std::uint8_t { Succeeded, Failed, Stopped };
std::string_view toString(DoneStatus status);

/// @brief Agent -> controller, the last frame: how the run ended.
struct Done
{
    static constexpr MessageType kType = MessageType::Done;
    DoneStatus status = DoneStatus::Succeeded;
    double final_loss = 0; ///< NaN when there is none (CBOR carries NaN, unlike JSON text)
    std::int64_t steps = 0;
    std::string message;

    nlohmann::json toJson() const;
    static Done fromJson(const nlohmann::json& j);
    bool operator==(const Done&) const = default;
};

/// Any message. The alternatives are in MessageType's order (alternative i has code i + 1; checked at compile
/// time), so the type tag indexes a table: no dispatch on names.
using Message = std::variant<Hello, RunSpec, RendezvousSet, RendezvousGet, RendezvousValue, Start, Stop, Resume,
    Telemetry, Heartbeat, Log, Error, Done, ClockProbe, ClockReply, FlightRecorderAsk, FlightRecorder>;

MessageType typeOf(const Message& message);
/// The message a frame carries. Throws ProtocolError for malformed CBOR, a payload that is not a map, or a missing
/// or ill-typed field.
Message decode(const Frame& frame);
/// The bytes of the frame carrying `message`.
std::string encode(const Message& message);

} // namespace pw::agents
