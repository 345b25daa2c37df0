// SPDX-License-Identifier: MIT
// A stand-in for libFuzzer's main() where there is none (GCC builds, CI): replays the target's seed corpus, then
// mutates it for a given time and feeds every mutant to LLVMFuzzerTestOneInput. No coverage feedback: mutants are
// stacked on the seeds and on a pool of recent mutants instead. It provides LLVMFuzzerMutate (byte-level edits) so
// that a target's LLVMFuzzerCustomMutator runs here as under libFuzzer.
//
//   fuzz_protocol [--seconds N] [--seed S] [--max-len L]
//
// Prints the iterations run and "no finding". A finding (an exception escaping the target, an abort, a crash) is
// printed, the input saved to fuzz-finding.bin in the working directory, and the process aborts.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t maxSize);
/// Optional in a target, as with libFuzzer: framing-aware mutations, say.
extern "C" __attribute__((weak)) size_t LLVMFuzzerCustomMutator(
    uint8_t* data, size_t size, size_t maxSize, unsigned int seed);
/// Optional in a target: valid inputs to start from (libFuzzer takes a corpus directory instead).
__attribute__((weak)) std::vector<std::string> pwFuzzSeeds();

namespace {

std::mt19937_64 g_rng;
// The input being run, for the signal handler: plain globals, since only async-signal-safe calls may read them.
const uint8_t* volatile g_input = nullptr;
volatile size_t g_inputSize = 0;
constexpr const char* kFindingFile = "fuzz-finding.bin";

void saveInput()
{
    const int fd = ::open(kFindingFile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    for (size_t at = 0; at < g_inputSize;) {
        const ssize_t n = ::write(fd, g_input + at, g_inputSize - at);
        if (n <= 0)
            break;
        at += static_cast<size_t>(n);
    }
    ::close(fd);
}

void onSignal(int sig)
{
    const char message[] = "finding: fatal signal; input saved to fuzz-finding.bin\n";
    [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
    saveInput();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

/// Catches aborts (the target's own checks) and crashes, unless a sanitizer already handles the signal.
void installHandlers()
{
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
        struct sigaction old
        {
        };
        if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO))
            std::signal(sig, onSignal);
    }
}

size_t below(size_t n)
{
    return n == 0 ? 0 : static_cast<size_t>(g_rng() % n);
}

struct Options
{
    double seconds = 10;
    std::uint64_t seed = 1;
    size_t maxLen = 4096;
};

[[noreturn]] void usage(const char* program)
{
    std::fprintf(stderr, "usage: %s [--seconds N] [--seed S] [--max-len L]\n", program);
    std::exit(2);
}

Options parseOptions(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc)
            usage(argv[0]);
        const char* value = argv[++i];
        char* end = nullptr;
        if (arg == "--seconds")
            o.seconds = std::strtod(value, &end);
        else if (arg == "--seed")
            o.seed = std::strtoull(value, &end, 10);
        else if (arg == "--max-len")
            o.maxLen = std::strtoull(value, &end, 10);
        if (!end || *end != '\0' || o.seconds < 0 || o.maxLen == 0)
            usage(argv[0]);
    }
    return o;
}

void run(const std::vector<uint8_t>& input)
{
    g_input = input.data();
    g_inputSize = input.size();
    try {
        LLVMFuzzerTestOneInput(input.data(), input.size());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "finding: exception escaped the target: %s\n", e.what());
        saveInput();
        std::abort();
    } catch (...) {
        std::fprintf(stderr, "finding: a non-standard exception escaped the target\n");
        saveInput();
        std::abort();
    }
}

/// One input to mutate: a seed half of the time, else a recent mutant.
std::vector<uint8_t> pickInput(
    const std::vector<std::vector<uint8_t>>& seeds, const std::vector<std::vector<uint8_t>>& pool)
{
    if (pool.empty() || g_rng() % 2)
        return seeds[below(seeds.size())];
    return pool[below(pool.size())];
}

std::vector<uint8_t> mutant(std::vector<uint8_t> input, size_t maxLen)
{
    size_t size = std::min(input.size(), maxLen);
    input.resize(std::max(input.size(), maxLen)); // room to grow, as libFuzzer gives its mutators
    const int edits = 1 + static_cast<int>(g_rng() % 4);
    for (int i = 0; i < edits; ++i)
        size = LLVMFuzzerCustomMutator
            ? LLVMFuzzerCustomMutator(input.data(), size, maxLen, static_cast<unsigned>(g_rng()))
            : LLVMFuzzerMutate(input.data(), size, maxLen);
    input.resize(size);
    return input;
}

} // namespace

/// libFuzzer's byte-level mutator, simplified: one edit of `data`, within maxSize bytes.
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t maxSize)
{
    static const uint8_t kInteresting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, 0x18, 0x1B, 0x9F, 0xBF, 0xF9, 0xFB};
    switch (g_rng() % 7) {
    case 0: // flip a bit
        if (size)
            data[below(size)] ^= static_cast<uint8_t>(1u << below(8));
        return size;
    case 1: // an interesting byte (CBOR heads among them)
        if (size)
            data[below(size)] = kInteresting[below(sizeof kInteresting)];
        return size;
    case 2: { // insert random bytes
        const size_t n = std::min<size_t>(1 + below(8), maxSize - std::min(maxSize, size));
        const size_t at = below(size + 1);
        std::memmove(data + at + n, data + at, size - at);
        for (size_t i = 0; i < n; ++i)
            data[at + i] = static_cast<uint8_t>(g_rng());
        return size + n;
    }
    case 3: { // erase a range
        if (size == 0)
            return 0;
        const size_t at = below(size);
        const size_t n = 1 + below(std::min<size_t>(16, size - at));
        std::memmove(data + at, data + at + n, size - at - n);
        return size - n;
    }
    case 4: // truncate
        return below(size + 1);
    case 5: { // duplicate a range at the end
        if (size == 0)
            return 0;
        const size_t at = below(size);
        const size_t n = std::min(1 + below(size - at), maxSize - std::min(maxSize, size));
        std::memmove(data + size, data + at, n);
        return size + n;
    }
    default: // a random little-endian 32-bit value
        if (size >= 4) {
            const auto v = static_cast<std::uint32_t>(g_rng() >> (g_rng() % 32));
            const size_t at = below(size - 3);
            for (int i = 0; i < 4; ++i)
                data[at + i] = static_cast<uint8_t>(v >> (8 * i));
        }
        return size;
    }
}

int main(int argc, char** argv)
{
    const Options options = parseOptions(argc, argv);
    g_rng.seed(options.seed);
    installHandlers();

    std::vector<std::vector<uint8_t>> seeds;
    for (const std::string& s : pwFuzzSeeds ? pwFuzzSeeds() : std::vector<std::string> {""})
        seeds.emplace_back(s.begin(), s.end());
    for (const auto& s : seeds)
        run(s);

    // A pool of recent mutants lets edits accumulate beyond the few stacked on one seed.
    std::vector<std::vector<uint8_t>> pool;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.seconds);
    std::uint64_t iterations = seeds.size();
    while (std::chrono::steady_clock::now() < deadline) {
        std::vector<uint8_t> input = mutant(pickInput(seeds, pool), options.maxLen);
        run(input);
        ++iterations;
        if (pool.size() < 1024)
            pool.push_back(std::move(input));
        else if (g_rng() % 8 == 0)
            pool[below(pool.size())] = std::move(input);
    }
    std::printf("%s: %llu iterations in %.0f s (seed %llu, max length %zu): no finding\n", argv[0],
        static_cast<unsigned long long>(iterations), options.seconds, static_cast<unsigned long long>(options.seed),
        options.maxLen);
    return 0;
}
