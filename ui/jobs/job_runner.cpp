// SPDX-License-Identifier: MIT
#include "job_runner.h"

#include <QEventLoop>
#include <QTimer>
#include <exception>
#include <utility>

namespace pw::ui {

JobRunner::JobRunner(QString name, QObject* parent)
    : QObject(parent)
    , m_name(std::move(name))
{
    m_worker = std::jthread([this](std::stop_token stop) { loop(stop); });
}

JobRunner::~JobRunner()
{
    {
        std::lock_guard lock(m_mutex);
        m_waiting = nullptr;
        if (m_hasRunning)
            m_runningStop.request_stop();
    }
    m_worker.request_stop();
    m_wake.notify_all();
    m_worker.join(); // queued deliveries to this object die with it (Qt drops calls to a deleted context)
}

quint64 JobRunner::enqueue(Task task, Supersede supersede)
{
    const bool wasBusy = busy();
    const quint64 job = ++m_submitted;
    m_newest = job;
    {
        std::lock_guard lock(m_mutex);
        m_waiting = std::move(task); // a job still waiting is superseded: it never runs
        m_waitingJob = job;
        m_stopWaiting = false;
        if (m_hasRunning && supersede == Supersede::StopRunning)
            m_runningStop.request_stop();
    }
    m_wake.notify_one();
    if (!wasBusy)
        emit busyChanged(true);
    return job;
}

void JobRunner::cancel()
{
    {
        std::lock_guard lock(m_mutex);
        m_waiting = nullptr;
        if (m_hasRunning)
            m_runningStop.request_stop();
    }
    if (busy()) {
        m_settled = m_submitted;
        emit busyChanged(false);
    }
}

void JobRunner::requestStop()
{
    std::lock_guard lock(m_mutex);
    if (m_waiting)
        m_stopWaiting = true; // it starts with its stop requested
    else if (m_hasRunning)
        m_runningStop.request_stop();
}

bool JobRunner::working() const
{
    std::lock_guard lock(m_mutex);
    return m_hasRunning;
}

void JobRunner::loop(std::stop_token stop)
{
    while (true) {
        Task task;
        quint64 job = 0;
        std::stop_token jobStop;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, stop, [this] { return static_cast<bool>(m_waiting); });
            if (stop.stop_requested())
                return;
            task = std::move(m_waiting);
            m_waiting = nullptr;
            job = m_waitingJob;
            m_runningStop = std::stop_source();
            if (std::exchange(m_stopWaiting, false))
                m_runningStop.request_stop();
            jobStop = m_runningStop.get_token();
            m_hasRunning = true;
        }
        try {
            task(jobStop, job);
        } catch (const Cancelled&) {
            settle(job);
        } catch (const std::exception& e) {
            // A job that stops on request may end in its own way (planner::Cancelled): not a failure.
            settle(job, jobStop.stop_requested() ? QString() : QString::fromLocal8Bit(e.what()));
        } catch (...) {
            settle(job, tr("unknown error"));
        }
        std::lock_guard lock(m_mutex);
        m_hasRunning = false;
    }
}

void JobRunner::deliver(quint64 job, std::function<void()> deliverResult)
{
    QMetaObject::invokeMethod(
        this,
        [this, job, deliverResult = std::move(deliverResult)] {
            if (markSettled(job))
                deliverResult();
        },
        Qt::QueuedConnection);
}

void JobRunner::settle(quint64 job, const QString& error)
{
    QMetaObject::invokeMethod(
        this,
        [this, job, error] {
            if (markSettled(job) && job == m_submitted && !error.isEmpty())
                emit failed(tr("%1: %2").arg(m_name, error));
        },
        Qt::QueuedConnection);
}

bool JobRunner::markSettled(quint64 job)
{
    if (job <= m_settled)
        return false; // something newer delivered, or the job was cancelled
    m_settled = job;
    if (!busy())
        emit busyChanged(false);
    return true;
}

bool JobRunner::waitForIdle(int timeoutMs)
{
    if (!busy())
        return true;
    QEventLoop loop;
    connect(this, &JobRunner::busyChanged, &loop, [this, &loop] {
        if (!busy())
            loop.quit();
    });
    QTimer::singleShot(timeoutMs, &loop, &QEventLoop::quit);
    loop.exec();
    return !busy();
}

} // namespace pw::ui
