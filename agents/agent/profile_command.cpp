// SPDX-License-Identifier: MIT
#include "profile_command.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/devices.h"
#include "planner/errors.h"
#include "planner/io/hf_config.h"
#include "planner/io/json_file.h"

namespace pw::agents {

using planner::InputError;

const char* const kProfileUsage
    = "usage: pipewright-agent --profile (--layers N --hidden N --heads N --seq N --vocab N --microbatch N\n"
      "                                   | --plan PLAN.json | --hf-config config.json --seq N --microbatch N)\n"
      "                                   [--threads N] [--repeats N] [--warmup N] [--seed N]\n"
      "                                   [--device cpu|cuda[:N]] [--precision fp32|bf16] [-o FILE]\n"
      "  Times every layer of the model (a GPT-2 of the shape given, the plan's model, or the Hugging Face\n"
      "  config's GPT-2, Llama, Mistral or Qwen2: embedding, blocks, head) forward and backward with the engine on "
      "this\n"
      "  machine (the median of --repeats passes after --warmup passes, default 10 and 1) with --threads BLAS\n"
      "  threads (default 1: give the threads each agent of the run gets), and writes a model profile (JSON) to\n"
      "  stdout or FILE. --plan takes the shape and microbatch size of a plan made with `profile transformer`.\n"
      "  --device cuda:N times them on CUDA device N (an index among those CUDA_VISIBLE_DEVICES leaves; cuda is\n"
      "  cuda:0) in --precision fp32 (the default) or bf16 (bf16 parameters and activations, fp32 master weights);\n"
      "  the CPU (the default) trains in fp32.\n";

namespace {

template <class T> T parseNumber(const std::string& option, const std::string& text)
{
    T value {};
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc() || ptr != end)
        throw InputError({}, 0, option, "'" + text + "' is not a whole number");
    return value;
}

/// Walks `args` as --help or -h (sets `help`) and OPTION VALUE pairs, each handed to `option`; throws InputError
/// for an option without its value or a word that is no option.
template <class Option> void forEachOption(const std::vector<std::string>& args, bool& help, Option option)
{
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            help = true;
            continue;
        }
        if (i + 1 >= args.size())
            throw InputError({}, 0, arg, arg.rfind("-", 0) == 0 ? "needs a value" : "unexpected argument");
        option(arg, args[++i]);
    }
}

} // namespace

std::optional<int> parseDevice(const std::string& option, const std::string& text)
{
    if (text == "cpu")
        return std::nullopt;
    if (text == "cuda")
        return 0;
    if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
        int index = -1;
        const auto* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data() + 5, end, index);
        if (ec == std::errc() && ptr == end && index >= 0)
            return index;
    }
    throw InputError({}, 0, option, "'" + text + "' is not a device: use cpu, cuda or cuda:N (N = 0, 1, ...)");
}

engine::Precision parsePrecision(const std::string& option, const std::string& text)
{
    if (text == "fp32")
        return engine::Precision::Fp32;
    if (text == "bf16")
        return engine::Precision::Bf16Mixed;
    throw InputError({}, 0, option, "'" + text + "' is not a precision: use fp32 or bf16");
}

void checkDeviceChoice(const engine::DeviceChoice& choice, int cudaDevices, bool cudaCompiledIn, const std::string& why)
{
    if (!choice.cuda) {
        if (choice.precision != engine::Precision::Fp32)
            throw InputError({}, 0, "--precision", "the CPU trains in fp32 only: give --device cuda[:N] for bf16");
        return;
    }
    const std::string device = "cuda:" + std::to_string(*choice.cuda);
    if (!cudaCompiledIn)
        throw InputError({}, 0, "--device",
            device
                + ": this agent was built without CUDA kernels (PW_WITH_CUDA=OFF, or no nvcc where it was built): "
                  "build it with CUDA, or measure with --device cpu");
    if (*choice.cuda >= cudaDevices) {
        const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
        throw InputError({}, 0, "--device",
            device + ": " + std::to_string(cudaDevices) + " CUDA device" + (cudaDevices == 1 ? " is" : "s are")
                + " visible here (CUDA_VISIBLE_DEVICES " + (mask ? "'" + std::string(mask) + "'" : "unset")
                + (why.empty() ? "" : "; " + why) + "; `pipewright-agent --capabilities --human` lists them)");
    }
}

ProfileArguments parseProfileArguments(const std::vector<std::string>& args)
{
    ProfileArguments a;
    a.options.shape = {0, 0, 0, 0, 0, 0, 4};
    auto& o = a.options;
    forEachOption(args, a.help, [&](const std::string& arg, const std::string& value) {
        if (arg == "--layers")
            o.shape.layers = parseNumber<int>(arg, value);
        else if (arg == "--hidden")
            o.shape.hidden = parseNumber<int>(arg, value);
        else if (arg == "--heads")
            o.shape.heads = parseNumber<int>(arg, value);
        else if (arg == "--seq")
            o.shape.sequence = parseNumber<int>(arg, value);
        else if (arg == "--vocab")
            o.shape.vocab = parseNumber<int>(arg, value);
        else if (arg == "--microbatch")
            o.shape.microbatch = parseNumber<int>(arg, value);
        else if (arg == "--threads")
            o.threads = parseNumber<int>(arg, value);
        else if (arg == "--repeats")
            o.repeats = parseNumber<int>(arg, value);
        else if (arg == "--warmup")
            o.warmup = parseNumber<int>(arg, value);
        else if (arg == "--seed")
            o.seed = parseNumber<std::uint64_t>(arg, value);
        else if (arg == "--device")
            o.device.cuda = parseDevice(arg, value);
        else if (arg == "--precision")
            o.device.precision = parsePrecision(arg, value);
        else if (arg == "--plan")
            a.plan = value;
        else if (arg == "--hf-config")
            a.hf_config = value;
        else if (arg == "-o" || arg == "--output")
            a.output = value;
        else
            throw InputError({}, 0, arg, "unknown option");
    });
    return a;
}

engine::ProfileOptions resolveProfileOptions(const ProfileArguments& args)
{
    engine::ProfileOptions o = args.options;
    const auto& s = o.shape;
    const bool shapeGiven
        = s.layers != 0 || s.hidden != 0 || s.heads != 0 || s.sequence != 0 || s.vocab != 0 || s.microbatch != 0;
    if (!args.hf_config.empty()) {
        if (!args.plan.empty())
            throw InputError({}, 0, "--hf-config", "give the model's shape by --plan or by --hf-config, not both");
        for (auto [name, value] :
            {std::pair {"--layers", s.layers}, {"--hidden", s.hidden}, {"--heads", s.heads}, {"--vocab", s.vocab}})
            if (value != 0)
                throw InputError({}, 0, name, "the shape comes from --hf-config: give --seq and --microbatch only");
        for (auto [name, value] : {std::pair {"--seq", s.sequence}, {"--microbatch", s.microbatch}})
            if (value == 0)
                throw InputError({}, 0, name, "missing: --hf-config needs the sequence and the microbatch");
        o.shape = planner::loadHfConfig(args.hf_config, planner::RunShape {s.sequence, s.microbatch, 4});
    } else if (!args.plan.empty()) {
        if (shapeGiven)
            throw InputError(
                {}, 0, "--plan", "give the model's shape either by --plan or by the shape options, not both");
        const planner::Plan plan = planner::loadPlan(args.plan);
        if (!plan.model->architecture)
            throw InputError(args.plan, 0, "/model/architecture",
                "the plan's model has no transformer shape: make the plan from `profile transformer` or a measured "
                "profile");
        o.shape = *plan.model->architecture;
        if (plan.schedule.microbatch_size > 0)
            o.shape.microbatch = plan.schedule.microbatch_size;
    } else {
        for (auto [name, value] : {std::pair {"--layers", s.layers}, {"--hidden", s.hidden}, {"--heads", s.heads},
                 {"--seq", s.sequence}, {"--vocab", s.vocab}, {"--microbatch", s.microbatch}})
            if (value == 0)
                throw InputError({}, 0, name, "missing: give the model's shape (or --plan PLAN.json)");
    }
    o.shape.bytes_per_element = 4;
    o.validate();
    // Before anything is measured: a device this agent cannot use is named with the reason.
    const int visible = o.device.cuda ? engine::cudaDeviceCount() : 0;
    checkDeviceChoice(o.device, visible, engine::cudaCompiledIn(),
        o.device.cuda && visible == 0 ? engine::probeCuda().error : std::string()); // why there is none
    return o;
}

namespace {

/// What both measuring commands share: their arguments parsed (exit status 2 with the usage when they are wrong),
/// --help, the measurement, and its JSON written to stdout or -o FILE (indented as `measure` says); exit status 1
/// with the error when measuring fails.
template <class Parse, class Measure>
int runMeasureCommand(const char* name, const char* usage, const std::vector<std::string>& args, std::ostream& out,
    std::ostream& err, Parse parse, Measure measure)
{
    decltype(parse(args)) parsed;
    try {
        parsed = parse(args);
    } catch (const InputError& e) {
        err << name << ": " << planner::formatInputError(e) << "\n" << usage;
        return 2;
    }
    if (parsed.help) {
        out << usage;
        return 0;
    }
    try {
        const auto [j, indent] = measure(parsed);
        if (parsed.output.empty())
            out << j.dump(indent) << "\n" << std::flush;
        else
            planner::writeJsonFile(parsed.output, j, indent);
        return 0;
    } catch (const InputError& e) {
        err << name << ": " << planner::formatInputError(e) << "\n";
    } catch (const std::exception& e) {
        err << name << ": " << e.what() << "\n";
    }
    return 1;
}

} // namespace

int runProfileCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    return runMeasureCommand("pipewright-agent --profile", kProfileUsage, args, out, err, parseProfileArguments,
        [](const ProfileArguments& parsed) {
            return std::pair {planner::toJson(engine::measureProfile(resolveProfileOptions(parsed))), 2};
        });
}

const char* const kGemmProfileUsage
    = "usage: pipewright-agent --profile-gemm [--device cuda[:N]] [--precision bf16|fp32|fp8] [--dims N,N,...]\n"
      "                                        [--repeats N] [-o FILE]\n"
      "  Times cuBLASLt's products D = A^T B (the engine's forward layout) for every m, n and k of --dims (default\n"
      "  128,256,512,1024,2048,3072,4096,8192,12288,16384: 1,000 shapes, under a minute on an H100), each the median\n"
      "  of --repeats (default 5) timings by CUDA events, in bf16 with fp32 accumulation (the default), fp32, or fp8\n"
      "  (E4M3 operands, bf16 result, fp32 fast accumulation: Transformer Engine's forward products; Hopper and\n"
      "  later), on random operands, and writes the GEMM table (JSON, docs/formats.md) that the planner's cost model\n"
      "  interpolates.\n";

GemmProfileArguments parseGemmProfileArguments(const std::vector<std::string>& args)
{
    GemmProfileArguments a;
    forEachOption(args, a.help, [&](const std::string& arg, const std::string& value) {
        if (arg == "--device") {
            const auto device = parseDevice(arg, value);
            if (!device)
                throw InputError({}, 0, arg, "GEMM throughput is measured on a GPU: give cuda or cuda:N");
            a.options.gpu = *device;
        } else if (arg == "--precision") {
            if (value == "bf16")
                a.options.dtype = engine::GemmDtype::Bf16;
            else if (value == "fp32")
                a.options.dtype = engine::GemmDtype::Fp32;
            else if (value == "fp8")
                a.options.dtype = engine::GemmDtype::Fp8;
            else
                throw InputError({}, 0, arg, "'" + value + "' is not a precision: use bf16, fp32 or fp8");
        } else if (arg == "--repeats") {
            a.options.repeats = parseNumber<int>(arg, value);
            if (a.options.repeats < 1)
                throw InputError({}, 0, arg, "must be at least 1");
        } else if (arg == "--dims") {
            std::size_t at = 0;
            while (at <= value.size()) {
                const std::size_t comma = std::min(value.find(',', at), value.size());
                const long long d = parseNumber<long long>(arg, value.substr(at, comma - at));
                if (d < 1 || d > 65536)
                    throw InputError({}, 0, arg, std::to_string(d) + " is not a dimension of 1 ... 65536");
                a.options.dims.push_back(d);
                at = comma + 1;
            }
        } else if (arg == "-o" || arg == "--output")
            a.output = value;
        else
            throw InputError({}, 0, arg, "unknown option");
    });
    return a;
}

int runGemmProfileCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    return runMeasureCommand("pipewright-agent --profile-gemm", kGemmProfileUsage, args, out, err,
        parseGemmProfileArguments, [&err](const GemmProfileArguments& parsed) {
            std::size_t tenth = 0;
            const auto table = engine::measureGemmTable(parsed.options, [&](std::size_t done, std::size_t all) {
                if (done * 10 / all > tenth || done == all) {
                    tenth = done * 10 / all;
                    err << "pipewright-agent --profile-gemm: " << done << " of " << all << " shapes\n" << std::flush;
                }
            });
            return std::pair {planner::toJson(table), 1}; // one sample a line: 1,000 of them
        });
}

} // namespace pw::agents
