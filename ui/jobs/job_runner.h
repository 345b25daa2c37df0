// SPDX-License-Identifier: MIT
// Work off the GUI thread: one worker thread per runner, the newest job wins, results come back as values on the
// runner's own thread. Every simulation and partitioner run of the desktop app goes through one of these.
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <type_traits>

namespace pw::ui {

/// @brief Runs jobs on a worker thread, newest first, and hands their results back by queued call.
///
/// Modelled on heaptrack's `Parser`: the worker owns nothing of the GUI's and only ever sees values; a job is a
/// function of a `std::stop_token` returning a value, and its result reaches `done` on the runner's thread (the GUI
/// thread) through the event loop.
///
/// A burst of submissions (the steps of a drag) never queues a backlog: at most one job runs and one waits, and a
/// new job replaces the waiting one. What happens to the running one is the submitter's choice (`Supersede`): stop
/// it (its result is stale: an undo, another project) or let it finish (a drag: the newest *finished* result is
/// shown while the newest one is computed, so the views follow the mouse at the speed of one job). Results are
/// delivered in order and never older than one already delivered. A job that is stopped, superseded by a delivered
/// newer one, cancelled, or throws after its stop was requested (planner::Cancelled) delivers nothing. Any other
/// exception escaping the newest job is reported by `failed()`.
///
/// `busy()` is true from a submission until the newest job has settled (delivered, failed or was cancelled).
/// `busyChanged()` fires at once; a busy indicator delays showing itself (by ~100 ms) so short jobs do not flicker.
class JobRunner : public QObject
{
    Q_OBJECT

public:
    /// `name` appears in the worker thread's name and in failure messages.
    explicit JobRunner(QString name, QObject* parent = nullptr);
    /// Stops the running job, drops the waiting one and joins the worker: nothing is delivered afterwards.
    ~JobRunner() override;

    JobRunner(const JobRunner&) = delete;
    JobRunner& operator=(const JobRunner&) = delete;

    /// Queues `work` (run on the worker) and `done` (run here with its result, unless a newer job came first).
    /// Returns the job's number; numbers grow with every submission.
    enum class Supersede {
        StopRunning, ///< the running job's result is stale: stop it
        LetRunningFinish, ///< the running job's result is still worth showing until the new one lands
    };

    template <class Work, class Done> quint64 submit(Work work, Done done, Supersede supersede = Supersede::StopRunning)
    {
        using Result = std::invoke_result_t<Work&, std::stop_token>;
        return enqueue(
            [this, work = std::move(work), done = std::move(done)](std::stop_token stop, quint64 job) mutable {
                auto result = std::make_shared<Result>(work(stop));
                if (stop.stop_requested() && m_newest.load() != job)
                    throw Cancelled {}; // superseded: a newer job delivers
                deliver(job, [done, result]() mutable { done(std::move(*result)); });
            },
            supersede);
    }

    /// Stops the running job and drops the waiting one; neither delivers. busy() turns false.
    void cancel();
    /// Asks the newest job to stop but still delivers what it returns (a partitioner stopped half-way says so).
    void requestStop();
    /// Whether the worker is executing a job now (a cancelled job may still be ending: its stop token is set).
    bool working() const;
    bool busy() const { return m_settled < m_submitted; }
    /// The number of the newest job submitted (0 before the first).
    quint64 latestJob() const { return m_submitted; }
    /// Runs the event loop until the newest job has settled or `timeoutMs` passed; true when idle. For tests,
    /// headless screenshots and callers that must have a result before they go on.
    bool waitForIdle(int timeoutMs = 60'000);

    /// Thrown by a job that noticed its stop token: it ends without a result, silently.
    struct Cancelled
    {
    };

signals:
    void busyChanged(bool busy);
    /// A job failed with an exception other than Cancelled (its message).
    void failed(const QString& message);

private:
    using Task = std::function<void(std::stop_token, quint64)>;
    quint64 enqueue(Task task, Supersede supersede);
    /// From the worker: run `deliverResult` on this object's thread unless something newer settled first.
    void deliver(quint64 job, std::function<void()> deliverResult);
    /// From the worker: `job` ended without a result (cancelled, superseded or failed with `error`).
    void settle(quint64 job, const QString& error = {});
    /// GUI thread: `job` settled; true when nothing newer had (its result may be shown).
    bool markSettled(quint64 job);
    void loop(std::stop_token stop);

    QString m_name;
    // GUI thread only.
    quint64 m_submitted = 0;
    quint64 m_settled = 0; ///< the newest job that delivered, failed or was cancelled
    // Shared with the worker, under m_mutex.
    std::atomic<quint64> m_newest {0}; ///< m_submitted, for the worker
    mutable std::mutex m_mutex;
    std::condition_variable_any m_wake;
    Task m_waiting;
    quint64 m_waitingJob = 0;
    bool m_stopWaiting = false; ///< requestStop() came before the waiting job started
    std::stop_source m_runningStop;
    bool m_hasRunning = false;
    std::jthread m_worker; // last: joined before anything above goes
};

} // namespace pw::ui
