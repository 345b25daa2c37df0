// SPDX-License-Identifier: MIT
// The background-job component: results come back on the GUI thread, the newest job wins, a burst of submissions
// never queues a backlog, cancel and stop requests, failures, and a runner destroyed mid-job.
#include <catch2/catch.hpp>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <atomic>
#include <chrono>
#include <thread>

#include "ui/jobs/job_runner.h"

using pw::ui::JobRunner;

namespace {

/// Busy-waits until `stop` is requested or `ms` have passed; true when it was stopped.
bool sleepUnlessStopped(std::stop_token stop, int ms)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
        if (stop.stop_requested())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

} // namespace

TEST_CASE("job runner: the work runs on the worker, the result arrives on the GUI thread", "[jobs]")
{
    JobRunner runner(QStringLiteral("test"));
    std::vector<bool> busy;
    QObject::connect(&runner, &JobRunner::busyChanged, [&](bool b) { busy.push_back(b); });
    QThread* workThread = nullptr;
    QThread* doneThread = nullptr;
    int result = 0;
    runner.submit(
        [&](std::stop_token) {
            workThread = QThread::currentThread();
            return 42;
        },
        [&](int r) {
            doneThread = QThread::currentThread();
            result = r;
        });
    CHECK(runner.busy());
    CHECK(result == 0); // never delivered synchronously
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(result == 42);
    CHECK(doneThread == QCoreApplication::instance()->thread());
    CHECK(workThread != doneThread);
    CHECK(busy == std::vector<bool> {true, false});
}

TEST_CASE("job runner: a burst of submissions runs a few jobs, delivers only the newest", "[jobs]")
{
    JobRunner runner(QStringLiteral("test"));
    std::atomic<int> started {0};
    std::vector<int> delivered;
    for (int i = 1; i <= 200; ++i)
        runner.submit(
            [&, i](std::stop_token stop) {
                ++started;
                sleepUnlessStopped(stop, 20);
                return i;
            },
            [&](int r) { delivered.push_back(r); });
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(delivered == std::vector<int> {200});
    // No backlog: the jobs that waited were replaced, not queued (the first one may have started, then the last).
    CHECK(started.load() <= 3);
    CHECK(runner.latestJob() == 200);
}

TEST_CASE("job runner: letting the running job finish shows it, then the newest", "[jobs]")
{
    JobRunner runner(QStringLiteral("test"));
    std::atomic<bool> firstRunning {false};
    std::vector<int> delivered;
    std::atomic<int> started {0};
    runner.submit(
        [&](std::stop_token stop) {
            ++started;
            firstRunning = true;
            sleepUnlessStopped(stop, 200);
            return 1;
        },
        [&](int r) { delivered.push_back(r); });
    while (!firstRunning)
        std::this_thread::yield();
    for (int i = 2; i <= 5; ++i) // the steps of a drag
        runner.submit(
            [&, i](std::stop_token) {
                ++started;
                return i;
            },
            [&](int r) { delivered.push_back(r); }, JobRunner::Supersede::LetRunningFinish);
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(delivered == std::vector<int> {1, 5}); // the newest finished result, then the newest
    CHECK(started.load() == 2); // 2, 3 and 4 were replaced while they waited
}

TEST_CASE("job runner: a stopped stale job delivers nothing, even if it returns", "[jobs]")
{
    JobRunner runner(QStringLiteral("test"));
    std::atomic<bool> firstRunning {false};
    std::atomic<bool> firstSawStop {false};
    std::vector<int> delivered;
    runner.submit(
        [&](std::stop_token stop) {
            firstRunning = true;
            firstSawStop = sleepUnlessStopped(stop, 5'000);
            return 1; // returns normally after the stop: still not delivered, a newer job exists
        },
        [&](int r) { delivered.push_back(r); });
    while (!firstRunning)
        std::this_thread::yield();
    runner.submit([](std::stop_token) { return 2; }, [&](int r) { delivered.push_back(r); });
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(firstSawStop);
    CHECK(delivered == std::vector<int> {2});
}

TEST_CASE("job runner: cancel drops everything at once, requestStop still delivers", "[jobs]")
{
    JobRunner runner(QStringLiteral("test"));
    std::vector<int> delivered;
    runner.submit([](std::stop_token stop) { return sleepUnlessStopped(stop, 5'000) ? -1 : 1; },
        [&](int r) { delivered.push_back(r); });
    runner.cancel();
    CHECK_FALSE(runner.busy());
    QElapsedTimer t;
    t.start();
    while (runner.working() && t.elapsed() < 10'000)
        QCoreApplication::processEvents();
    CHECK_FALSE(runner.working()); // the job saw its stop token and ended
    QCoreApplication::processEvents();
    CHECK(delivered.empty());

    // requestStop: the job ends early and says so; its result is delivered.
    runner.submit([](std::stop_token stop) { return sleepUnlessStopped(stop, 5'000) ? -1 : 1; },
        [&](int r) { delivered.push_back(r); });
    runner.requestStop(); // before or after the job started: it sees the request either way
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(delivered == std::vector<int> {-1});
}

TEST_CASE("job runner: a failing job is reported and the runner goes on", "[jobs]")
{
    JobRunner runner(QStringLiteral("simulation"));
    QString failure;
    QObject::connect(&runner, &JobRunner::failed, [&](const QString& m) { failure = m; });
    int delivered = 0;
    runner.submit([](std::stop_token) -> int { throw std::runtime_error("out of cheese"); }, [&](int) { ++delivered; });
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(failure == "simulation: out of cheese");
    CHECK(delivered == 0);
    runner.submit([](std::stop_token) { return 7; }, [&](int r) { delivered = r; });
    REQUIRE(runner.waitForIdle(10'000));
    CHECK(delivered == 7);
}

TEST_CASE("job runner: destroyed while a job runs, it stops and joins it and delivers nothing", "[jobs]")
{
    std::atomic<bool> running {false};
    std::atomic<bool> sawStop {false};
    int delivered = 0;
    {
        JobRunner runner(QStringLiteral("test"));
        runner.submit(
            [&](std::stop_token stop) {
                running = true;
                sawStop = sleepUnlessStopped(stop, 10'000);
                return 1;
            },
            [&](int r) { delivered = r; });
        while (!running)
            std::this_thread::yield();
    }
    CHECK(sawStop);
    QCoreApplication::processEvents();
    CHECK(delivered == 0);
}
