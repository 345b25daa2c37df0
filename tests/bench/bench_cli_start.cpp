// SPDX-License-Identifier: MIT
// How long `pipewright-cli --version` (and `--help`) takes from exec to exit, and the most memory it holds (the
// kernel's peak resident set, wait4's ru_maxrss), against /bin/true measured in the same run: a program's start is
// what every script and every planner call through the CLI pays. Targets (issue 30 item 10): under 10 ms and under
// 30 MB on a machine without a GPU; the CUDA libraries (cuBLASLt: 541 MB mapped, 60 ms) are loaded only where a GPU
// is used.
//   bench_cli_start [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

struct Sample
{
    double seconds = 0;
    long max_rss_kib = 0;
};

/// One start of `argv` with its output to /dev/null: wall time from spawn to reaped exit, and its peak RSS.
Sample once(const std::vector<std::string>& args)
{
    std::vector<char*> argv;
    for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    const auto t0 = std::chrono::steady_clock::now();
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
        std::perror(argv[0]);
        std::exit(1);
    }
    int status = 0;
    rusage usage {};
    ::wait4(pid, &status, 0, &usage);
    const auto t1 = std::chrono::steady_clock::now();
    posix_spawn_file_actions_destroy(&actions);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "%s exited with %d\n", argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        std::exit(1);
    }
    return {std::chrono::duration<double>(t1 - t0).count(), usage.ru_maxrss};
}

/// Median time and peak RSS over `repeats` starts (after one warm-up start that fills the page cache).
Sample median(const std::vector<std::string>& args, int repeats)
{
    once(args);
    std::vector<Sample> samples;
    for (int i = 0; i < repeats; ++i)
        samples.push_back(once(args));
    std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.seconds < b.seconds; });
    Sample m = samples[samples.size() / 2];
    for (const auto& s : samples)
        m.max_rss_kib = std::max(m.max_rss_kib, s.max_rss_kib);
    return m;
}

} // namespace

int main(int argc, char** argv)
{
    int repeats = 50;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--repeats") == 0)
            repeats = std::max(1, std::atoi(argv[i + 1]));
    const Sample baseline = median({"/bin/true"}, repeats);
    std::printf("# program start, median of %d starts; peak RSS the largest of them\n", repeats);
    std::printf("%-40s %10s %10s %12s\n", "command", "ms", "x /bin/true", "peak RSS MB");
    std::printf(
        "%-40s %10.2f %10.1f %12.1f\n", "/bin/true", baseline.seconds * 1e3, 1.0, baseline.max_rss_kib / 1024.0);
    for (const std::vector<std::string>& args :
        {std::vector<std::string> {PW_CLI_EXE, "--version"}, std::vector<std::string> {PW_CLI_EXE, "--help"}}) {
        const Sample s = median(args, repeats);
        const std::string name = "pipewright-cli " + args[1];
        std::printf("%-40s %10.2f %10.1f %12.1f\n", name.c_str(), s.seconds * 1e3, s.seconds / baseline.seconds,
            s.max_rss_kib / 1024.0);
    }
    return 0;
}
