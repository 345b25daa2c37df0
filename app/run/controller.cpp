// SPDX-License-Identifier: MIT
// The run controller (controller.h): a run prepared, launched, looped over and finished; checkRun.
#include "controller_impl.h"

namespace pw::app {

std::string_view toString(AgentStatus::State state)
{
    switch (state) {
    case AgentStatus::State::Starting:
        return "starting";
    case AgentStatus::State::Running:
        return "running";
    case AgentStatus::State::Done:
        return "done";
    case AgentStatus::State::Failed:
        return "failed";
    case AgentStatus::State::Exited:
        return "exited";
    }
    return "?";
}

std::filesystem::path defaultAgentExecutable(const std::filesystem::path& self)
{
    if (const char* env = std::getenv("PIPEWRIGHT_AGENT"); env && *env)
        return env;
    std::error_code ec;
    const auto dir = std::filesystem::canonical(self, ec).parent_path();
    for (const auto& candidate : {dir / "pipewright-agent", dir.parent_path() / "agents" / "pipewright-agent"})
        if (!ec && std::filesystem::exists(candidate))
            return candidate;
    return "pipewright-agent";
}

void RunController::Impl::flush()
{
    if (deviceNamesChanged)
        history.setDeviceNames(runId, deviceNames);
    deviceNamesChanged = false;
    if (!spanBuffer.empty())
        history.appendSpans(runId, spanBuffer);
    if (!metricBuffer.empty())
        history.appendMetrics(runId, metricBuffer);
    if (!logBuffer.empty())
        history.appendLogs(runId, logBuffer);
    spanBuffer.clear();
    metricBuffer.clear();
    logBuffer.clear();
}

void RunController::Impl::shutdown()
{
    // Stop politely, then SIGTERM, then SIGKILL: a device blocked in a transfer whose peer died answers none of
    // the polite ways. (A served agent that already said Done takes the Stop as goodbye and exits.)
    for (auto& a : agents)
        if (!a->exited)
            send(*a, agents::Stop {failure.empty() ? "stop requested" : "the run failed: " + failure});
    const auto deadline = Clock::now() + 1500ms;
    auto reap = [&] {
        bool all = true;
        for (auto& a : agents) {
            if (a->exited || !a->conn)
                continue;
            if (auto end = a->conn->ended(false)) {
                a->exited = true;
                a->exit_text = *end;
            } else
                all = false;
        }
        return all;
    };
    while (!reap() && Clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
    for (auto& a : agents)
        if (!a->exited && a->conn)
            a->conn->signal(SIGTERM);
    const auto hard = Clock::now() + 1500ms;
    while (!reap() && Clock::now() < hard)
        std::this_thread::sleep_for(20ms);
    for (auto& a : agents)
        if (!a->exited && a->conn) {
            a->conn->signal(SIGKILL);
            a->exited = true;
            a->exit_text = a->conn->ended(true).value_or("was killed (SIGKILL)");
        }
}

// ---------------------------------------------------------------------------------------------------------------

RunController::RunController(RunRequest request, HistoryStore& history)
    : m_impl(std::make_unique<Impl>(std::move(request), history))
{
}

RunController::~RunController() = default;

void RunController::stop()
{
    m_impl->stopRequested = true;
}

CheckedRun checkRun(const RunRequest& req)
{
    // (app/run/run_checks.h)
    validateRunSettings(req);
    checkTrainable(req.plan); // the model's shape, and only settings the engine honours
    for (const auto& stage : req.plan.stages) // a precision the GPUs have no kernels for, before anything starts
        for (int d : stage.devices)
            if (cudaDeviceOf(*req.plan.cluster, d))
                gpuPrecision(req.plan);
    {
        planner::Plan p = req.plan;
        p.schedule.iterations = std::min(req.training.steps, 2); // the agents generate the rest (engine::runProgram)
        p.validate();
        planner::generateSchedule(p); // throws for a schedule the plan does not suit
    }
    if (req.remote && req.slurm)
        throw planner::InputError("a run goes over SSH or through Slurm, not both");
    if (req.local()) // a remote run's files are on its hosts, where its agents check them the same way
        checkRunFiles(req);
    else if (req.remote)
        requireEnvValues(*req.plan.cluster);
    else { // the partition must hold the plan: refused here, before anything is submitted (app/run/slurm.h)
        SlurmOptions slurm = *req.slurm;
        slurm.cpus_per_task = std::max(1, req.threads.value_or(1));
        requireSlurmFit(req.plan, slurm);
    }
    // The prediction of the first steps: the schedule repeats, so a few steps give the per-step figures and the
    // overlay's shape, and a run of a million steps is not simulated (and stored) in full first. It is also what
    // a local run's memory is checked against.
    CheckedRun out;
    out.predicted_steps = std::min(req.training.steps, kPredictedSteps);
    planner::Plan predicted = req.plan;
    predicted.schedule.iterations = out.predicted_steps;
    try {
        out.prediction = planner::simulate(predicted);
    } catch (const std::exception& e) {
        out.no_prediction = e.what();
    }
    if (req.local()) // before the run is recorded: GPUs this machine does not have fail here, not in an agent
        checkLocalGpus(req.plan, out.prediction ? &*out.prediction : nullptr);
    const auto machine = MachineResources::thisMachine();
    if (req.local() && !req.force)
        if (const auto excess
            = localRunExcess(localRunLoad(req, out.prediction ? &*out.prediction : nullptr, machine), machine);
            !excess.empty())
            throw planner::InputError(excess + ": give --force to start it anyway");
    return out;
}

RunOutcome RunController::run(const RunObserver& o)
{
    // Everything that can be refused is checked before the run is recorded and a process starts.
    return run(o, checkRun(m_impl->request));
}

RunOutcome RunController::run(const RunObserver& o, CheckedRun checked)
{
    Impl& s = *m_impl;
    s.prepare(checked, o);
    s.launch(o);
    s.loop(o);
    return s.finish(o);
}

void RunController::Impl::prepare(CheckedRun& checked, const RunObserver& o)
{
    const auto machine = MachineResources::thisMachine();
    const auto& arch = *request.plan.model->architecture;
    microbatches = request.plan.microbatchesPerStep(); // every pipeline (virtual worker) takes its own
    const int b = request.plan.schedule.microbatch_size > 0 ? request.plan.schedule.microbatch_size : arch.microbatch;
    tokensPerStep = static_cast<double>(microbatches) * b * arch.sequence;

    // One agent per device, or per GPU that several devices share (agentDevices), in device order.
    std::set<int> devices;
    for (const auto& st : request.plan.stages)
        devices.insert(st.devices.begin(), st.devices.end());
    threadsPerAgent = localRunLoad(request, nullptr, machine).threads_per_agent;

    NewRun nr;
    nr.plan_json = planner::toJson(request.plan).dump();
    nr.cluster_json = planner::toJson(*request.plan.cluster).dump();
    launcher = makeLauncher(request);
    threadsPerAgent = launcher->threadsPerAgent().value_or(threadsPerAgent);
    nlohmann::json hosts = nlohmann::json::array();
    for (int d : devices)
        hosts.push_back(launcher->hostOf(d));
    nr.hosts_json = hosts.dump();
    nr.launcher = launcher->kind();
    nr.label = request.plan_label;
    nr.steps_planned = request.training.steps;
    runId = history.createRun(nr);
    recordedAt = monotonicNow();
    planJson = nr.plan_json;
    auto& sim = checked.prediction;
    try {
        if (!sim)
            throw std::runtime_error(checked.no_prediction);
        sim->timeline.run_id = runId;
        history.savePredicted(runId, sim->timeline, checked.predicted_steps);
        if (request.training.steps <= kLiveDiagnosisSteps) {
            liveProgram = runProgramSchedule(request.plan, request.training.steps);
            livePredicted = sim->timeline;
        }
        // What each kind of action takes on each device, as predicted: an action far beyond it is a stall too.
        std::map<std::pair<int, int>, std::pair<double, int>> sums;
        for (const auto& sp : sim->timeline.spans) {
            auto& [sum, count] = sums[{sp.device, static_cast<int>(sp.kind)}];
            sum += sp.t1 - sp.t0;
            ++count;
        }
        for (const auto& [key, sc] : sums)
            predictedAction[key] = sc.first / sc.second;
        deviceNames = sim->timeline.device_names;
    } catch (const std::exception& e) {
        logBuffer.push_back({0, -1, -1, "warning", std::string("no prediction: ") + e.what()});
    }

    for (auto& group : agentDevices(request.plan)) { // devices sharing a GPU: one agent, over its device fabric
        auto a = std::make_unique<AgentLink>();
        a->name = "agent " + std::to_string(group.front());
        a->devices = std::move(group);
        agents.push_back(std::move(a));
    }
    if (o.created)
        o.created(runId);
}

void RunController::Impl::launch(const RunObserver& o)
{
    std::signal(SIGPIPE, SIG_IGN);
    // The agents write their stages into the checkpoint in place: an old file must not leave its bytes there.
    if (const auto& save = request.training.save_checkpoint; !save.empty()) {
        std::error_code ec;
        std::filesystem::remove(save, ec);
        if (ec)
            fail(save + ": cannot replace the checkpoint: " + ec.message());
    }
    t0 = monotonicNow();
    try {
        // What the launcher needs first: SSH sessions and uploads, a Slurm job and its agents connected back.
        std::vector<int> devices;
        for (const auto& a : agents)
            devices.push_back(a->devices.front());
        LaunchContext context;
        context.run_id = runId;
        context.log = [&](const std::string& line) { logLine(-1, "info", line, o); };
        context.stop_requested = [this] { return stopRequested.load(); };
        try {
            launcher->prepare(devices, planJson, context);
        } catch (...) {
            recordJob(); // a job that was submitted is the run's even when its agents never came
            throw;
        }
        recordJob();
        if (stopRequested)
            return; // asked while the launcher waited (a pending job): nothing more starts
        for (auto& a : agents) {
            a->conn = launcher->startAgent(a->devices.front());
            a->last_heard = Clock::now(); // silence counts from its start (an upload before may take a while)
        }
    } catch (const std::exception& e) {
        fail(e.what());
    }
    // The key that proves the agents' Gloo connections to each other: new per run, sent only over the agents'
    // channels (pipes, SSH), never stored or logged (docs/execution.md, threat model).
    std::vector<std::uint8_t> glooSecret(32);
    try {
        agents::crypto::randomBytes(glooSecret);
    } catch (const std::exception& e) {
        fail(std::string("no random bytes for the run's Gloo key: ") + e.what());
    }
    for (auto& a : agents) {
        if (!a->conn || !failure.empty()) // a run without its key sends no plan: the agents are stopped in finish
            continue; // not started: the run failed before (an unreachable node)
        send(*a, runSpecFor(*a, glooSecret));
    }
}

agents::RunSpec RunController::Impl::runSpecFor(const AgentLink& a, const std::vector<std::uint8_t>& glooSecret) const
{
    agents::RunSpec spec;
    spec.gloo_secret = glooSecret;
    spec.run_id = runId;
    spec.agent = a.name;
    spec.plan = planner::toJson(request.plan);
    spec.devices = a.devices;
    spec.training = request.training;
    spec.threads = threadsPerAgent;
    spec.transport = runTransport(request.plan); // NCCL between GPUs of their own, else Gloo
    spec.telemetry_batch = request.telemetry_batch;
    assignDevices(spec, request.plan); // the node's GPU for each device; none on a CPU node
    for (std::size_t i = 0; i < spec.cuda_devices.size(); ++i) // as the launcher's agents see their GPUs
        if (spec.cuda_devices[i] >= 0)
            spec.cuda_devices[i] = launcher->cudaDevice(spec.devices[i], spec.cuda_devices[i]).value_or(-1);
    spec.journal_path = launcher->journalPath(a.devices.front());
    spec.gloo_host = launcher->glooHost(a.devices.front());
    return spec;
}

void RunController::Impl::loop(const RunObserver& o)
{
    lastFlush = Clock::now();
    while (failure.empty()) {
        if (stopRequested && !stopping) {
            stopping = true;
            break;
        }
        probeClocks();
        startWhenReady();
        if (std::all_of(agents.begin(), agents.end(), [](auto& a) { return a->done; }))
            break;
        if (!readReady(o))
            break;
        reconnectLost(o);
        checkSilence(o);
        checkStall(o);
        logAgentErrors(o, false);
        checkAllocation();
        reportAgents(o);
        flushPeriodically();
    }
}

void RunController::Impl::startWhenReady()
{
    // Start once every agent has said hello and its clock is known (a few round trips: the first spans are then
    // already on the controller's clock).
    if (started || !std::all_of(agents.begin(), agents.end(), [](auto& a) {
            return a->hello && a->clock.samples() >= kClockSamplesBeforeStart;
        }))
        return;
    started = true;
    statusChanged = true;
    t0 = monotonicNow();
    lastProgress = Clock::now();
    for (auto& a : agents)
        send(*a, agents::Start {});
}

void RunController::Impl::recordJob()
{
    if (const auto job = launcher->jobId(); !job.empty() && job != recordedJob) {
        history.setJobId(runId, job);
        recordedJob = job;
    }
}

void RunController::Impl::checkAllocation()
{
    // A job the scheduler ended (cancelled from outside, out of time, a node failed) fails the run with its reason,
    // even before its agents' links tell (they may be killed without a word).
    if (Clock::now() < nextAllocationCheck)
        return;
    nextAllocationCheck = Clock::now() + 1s;
    if (auto ended = launcher->allocationEnded())
        fail(*ended);
}

void RunController::Impl::flushPeriodically()
{
    // Batched, yet never more than a quarter of a second behind: a viewer of the history follows the run, and a
    // controller killed mid-run loses at most that much.
    if (spanBuffer.size() + metricBuffer.size() <= 4096 && Clock::now() - lastFlush <= 250ms)
        return;
    try {
        flush();
    } catch (const std::exception& e) {
        // Stop the agents and keep what is stored; a run that cannot be recorded failed, even while stopping.
        if (failure.empty())
            failure = std::string("cannot record the run: ") + e.what();
    }
    lastFlush = Clock::now();
}

RunOutcome RunController::Impl::finish(const RunObserver& o)
{
    if (!failure.empty())
        nameFirstCause(o);
    logAgentErrors(o, true); // what nameFirstCause learnt decides their level
    // A scheduler that ended the job (cancelled, out of time) is the cause of whatever its agents did then: killed,
    // or stopped as if asked (SIGTERM), which alone would look like a finished run.
    if (!stopping && !stopRequested && launcher)
        if (auto ended = launcher->allocationEnded(); ended && failure.rfind(*ended, 0) != 0)
            failure = *ended + (failure.empty() ? "" : "; then " + failure);
    if ((stopping || stopRequested) && launcher)
        launcher->cancel(); // a stopped run's job ends as cancelled, whatever its agents do on their Stop
    shutdown();
    // Whatever was already on the pipes still counts (the last batches before Done).
    for (auto& a : agents) {
        if (!a->conn || a->lost)
            continue;
        try {
            readAvailable(*a, readBuffer, o);
        } catch (const std::exception&) {
        }
    }
    if (launcher)
        for (const auto& line : launcher->teardown())
            logLine(-1, "info", line, o);
    for (auto& a : agents)
        a->conn.reset();

    logAgentErrors(o, true); // those read last
    RunOutcome out = outcome();
    logLine(-1, out.status == RunStatus::Failed ? "error" : "info",
        std::string("run ") + std::string(toString(out.status)) + (out.message.empty() ? "" : ": " + out.message), o);
    try {
        storeLastEvents();
    } catch (const std::exception& e) {
        // What could not be stored is lost, but the run still ends with a status, and says why.
        if (out.status != RunStatus::Failed)
            out.message.clear();
        out.status = RunStatus::Failed;
        out.message
            += (out.message.empty() ? "" : "; ") + std::string("cannot record the run's last events: ") + e.what();
    }
    history.finishRun(runId, out.status, out.message);
    reportAgents(o, true);
    return out;
}

void RunController::Impl::nameFirstCause(const RunObserver& o)
{
    // One failure brings others (a dead agent's peers fail their transfers): read for a moment what is still on
    // the way, so that an agent that died on its own is known, and name it first as the cause.
    const auto until = Clock::now() + 500ms;
    while (Clock::now() < until) {
        for (auto& a : agents) {
            if (!a->conn || a->lost || a->exited)
                continue;
            try {
                if (readAvailable(*a, readBuffer, o) < 0)
                    onEnd(*a, o);
            } catch (const std::exception&) {
            }
        }
        std::this_thread::sleep_for(20ms);
    }
    std::string causes;
    for (auto& a : agents)
        if (a->died && failure.rfind(a->name + " ", 0) != 0)
            causes += a->name + (a->conn->where() == "local" ? "" : " on " + a->conn->where()) + " " + a->exit_text
                + " before the run finished; then ";
        else if (a->stopped_alone && failure.rfind(a->name + " ", 0) != 0)
            causes += a->name + (a->conn->where() == "local" ? "" : " on " + a->conn->where())
                + " stopped before the run finished: " + a->done_message + "; then ";
    failure = causes + failure;
}

RunOutcome RunController::Impl::outcome() const
{
    RunOutcome out;
    out.run_id = runId;
    out.losses = losses;
    out.seconds = monotonicNow() - recordedAt; // as `history list` counts it: from the run's record to its end
    out.spans = spanCount;
    if (!stepEnds.empty() && stepEnds.back() > 0)
        out.tokens_per_s = tokensPerStep * static_cast<double>(stepEnds.size()) / stepEnds.back();
    if (!failure.empty()) {
        out.status = RunStatus::Failed;
        out.message = failure;
    } else if (stopping) {
        out.status = RunStatus::Stopped;
        out.message = "stopped by the user";
    } else {
        out.status = RunStatus::Succeeded;
    }
    return out;
}

void RunController::Impl::storeLastEvents()
{
    // Each agent's clock as measured: the offsets every span was moved by, and their uncertainty.
    std::vector<AgentClock> clocks;
    for (std::size_t i = 0; i < agents.size(); ++i) {
        const auto& a = *agents[i];
        if (a.clock.known())
            clocks.push_back({static_cast<int>(i), a.host, a.clock.offset(), a.clock.convertedWithin(),
                static_cast<std::int64_t>(a.clock.samples())});
    }
    history.setAgentClocks(
        runId, clocks, launcher->remoteClocks() ? planner::ClockDomain::Aligned : planner::ClockDomain::Host);
    flush();
}

} // namespace pw::app
