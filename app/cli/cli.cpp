// SPDX-License-Identifier: MIT
// Argument parsing (CLI11) and dispatch to the subcommands.
#include "cli.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "measure_commands.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/schedule/generator.h"
#include "run_commands.h"

namespace pw::cli {

namespace {

constexpr const char* kExitStatusHelp = "Exit status: 0 done; 1 error (bad input, no plan); 2 usage error (a wrong "
                                        "or meaningless option); 3 the plan was written and printed but does not "
                                        "fit device memory; 4 a run started but failed or was stopped (its record "
                                        "is in the history).\nMemory is shown in GiB (2^30 bytes), bandwidth in "
                                        "GB/s (1e9 bytes/s).";

/// Schedule and device options shared by `plan` and `compare`.
void addSharedPartitionOptions(CLI::App* cmd, planner::PartitionOptions& p)
{
    cmd->add_option("--schedule", p.schedule.kind, "schedule kind (gpipe, 1f1b, pipedream, 2bw, interleaved, ...)")
        ->capture_default_str()
        ->check(
            [](const std::string& kind) -> std::string {
                if (planner::findScheduleGenerator(kind))
                    return {};
                std::string known;
                for (const auto* g : planner::scheduleGenerators())
                    known += (known.empty() ? "" : ", ") + std::string(g->name());
                return "unknown schedule kind '" + kind + "' (known: " + known + ")";
            },
            "KIND");
    cmd->add_option("--microbatches", p.schedule.microbatches, "microbatches per batch")->capture_default_str();
    cmd->add_option("--microbatch-size", p.schedule.microbatch_size, "samples per microbatch (0 = the profile's)");
    cmd->add_option("--chunks", p.schedule.chunks, "virtual stages per device (interleaved)")->capture_default_str();
    cmd->add_option("--iterations", p.schedule.iterations, "batches to simulate")->capture_default_str();
    cmd->add_option_function<std::string>(
           "--recompute",
           [&p](const std::string& mode) {
               p.schedule.recompute = planner::recomputeNamed(mode.empty() ? "full" : mode, "--recompute");
           },
           "activation recomputation: none | selective (the attention core) | full (every block from its input); "
           "alone: full")
        ->expected(0, 1)
        ->check(
            [](const std::string& mode) -> std::string {
                try {
                    if (!mode.empty())
                        planner::recomputeNamed(mode, "--recompute");
                    return {};
                } catch (const planner::InputError& e) {
                    return e.message(); // a usage error before anything runs, not an exception out of the parser
                }
            },
            "MODE");
    cmd->add_flag("--sequence-parallel", p.schedule.sequence_parallel,
        "Megatron's sequence parallelism with tensor parallelism: norms, dropouts and their activations split over "
        "the group");
    cmd->add_flag("--tp-comm-overlap", p.schedule.tp_comm_overlap,
        "Megatron's --tp-comm-overlap (with --sequence-parallel): the tensor-parallel all-gathers and reduce-scatters "
        "pipelined with their GEMMs in t chunks");
    cmd->add_flag("!--no-overlap-grad-reduce", p.schedule.overlap_grad_reduce,
        "start the data-parallel gradient sum after the backward (Megatron's local DDP) instead of bucket by bucket "
        "during it (--overlap-grad-reduce, the default)");
    cmd->add_option_function<int>(
           "--zero-stage",
           [&p](int stage) {
               const bool distributed = p.schedule.distributed_optimizer; // --distributed-optimizer beside it stays
               planner::setZeroStage(p.schedule, stage);
               p.schedule.distributed_optimizer = p.schedule.distributed_optimizer || distributed;
           },
           "ZeRO stage: 1 the distributed optimizer (as --distributed-optimizer), 2 also the gradients sharded over "
           "the data-parallel replicas, 3 also the weights (FSDP: gathered layer by layer every microbatch)")
        ->check(CLI::Range(0, 3));
    cmd->add_option("--shard-group", p.schedule.shard_group,
           "hybrid sharding (HSDP): ZeRO shards over groups of N data-parallel replicas, each group a whole copy, the "
           "groups summing their shards once per step (default 0: every replica)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--overlap-param-gather", p.schedule.overlap_param_gather,
        "Megatron's --overlap-param-gather (with --distributed-optimizer): the updated parameters' all-gather runs "
        "under the next forward");
    cmd->add_option("--optimizer", p.schedule.optimizer, "sgd | momentum | adam")->capture_default_str();
    cmd->add_option("--precision", p.schedule.precision,
        "weights: fp32 | bf16 | fp16 | fp8 (default: the profile's; below fp32 the optimizer keeps fp32 master "
        "weights; fp8 needs a profile made with `profile transformer --precision fp8`)");
    cmd->add_option(
        "--gradient-precision", p.schedule.gradient_precision, "gradients: fp32 | bf16 | fp16 (default: the weights')");
    cmd->add_flag("--distributed-optimizer", p.schedule.distributed_optimizer,
        "shard master weights and optimizer moments over a stage's data-parallel replicas (Megatron, ZeRO-1)");
    cmd->add_flag(
        "--no-overlap", [&p](std::int64_t) { p.schedule.overlap_communication = false; },
        "sends and receives block compute");
    cmd->add_option("--devices", p.devices, "use the first N devices (default: all)")->check(CLI::PositiveNumber);
    cmd->add_flag("--memory-limit", p.memory_limit, "reject stages over device memory");
}

void addPlanOptions(CLI::App* cmd, PlanOptions& o)
{
    auto& p = o.partition;
    cmd->add_option("--model", o.model, "model profile: native JSON or PipeDream graph.txt")->required();
    cmd->add_option("--cluster", o.cluster, "cluster JSON")->required();
    cmd->add_option("--algorithm", o.algorithm, "partitioning algorithm (see `pipewright-cli algorithms`)")->required();
    cmd->add_option("-o,--output", o.output, "write the plan JSON here");
    addSharedPartitionOptions(cmd, p);
    cmd->add_option("--stages", p.stages, "stage count for uniform/parameters (default: one per device)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--straight", p.straight, "no replication: one device per stage");
    cmd->add_option("--pipedream-variant", p.pipedream_variant, "paper | reference")->capture_default_str();
    cmd->add_option("--activation-compression-ratio", p.activation_compression_ratio,
        "reference variant: count stage-to-stage traffic divided by this ratio");
    cmd->add_flag("--per-worker-allreduce", p.per_worker_allreduce, "read B_k as per-worker bandwidth");
    cmd->add_flag("--flat", p.flat, "PipeDream: one level over all devices");
    cmd->add_flag("--use-fewer-machines", p.use_fewer_machines,
        "PipeDream: leave out replicas that do not make their stage faster than the slowest one");
    cmd->add_option("--boundaries", o.boundaries, "manual: last layer of every stage but the last, e.g. 5,11,17");
    cmd->add_option("--set", o.settings, "algorithm option NAME=VALUE (repeatable; see `pipewright-cli algorithms`)");
    cmd->add_option("--costs", o.costs,
        "predict the plan with calibrated costs (`pipewright-cli calibrate`; they must fit the plan's stages)");
    cmd->add_flag("--json", o.json, "print the result as JSON");
}

} // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app {"pipewright-cli: plan, simulate and export pipeline-parallel training"};
    app.name("pipewright-cli");
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string(PW_VERSION));
    app.footer(kExitStatusHelp);

    auto* profile = app.add_subcommand("profile", "create model profiles");
    profile->require_subcommand(1);
    ImportOptions importOpt;
    auto* imp = profile->add_subcommand("import-pipedream", "convert a PipeDream graph.txt to a model JSON");
    imp->add_option("graph", importOpt.input, "graph.txt")->required();
    imp->add_option("-o,--output", importOpt.output, "model JSON to write")->required();
    imp->add_option("--name", importOpt.name, "model name (default: the graph's folder)");
    imp->add_option("--batch-size", importOpt.batch_size,
           "samples per profiled minibatch, for throughput in samples/s (graph.txt does not store it)")
        ->check(CLI::PositiveNumber);
    imp->add_flag("--json", importOpt.json, "print a JSON summary");
    TransformerOptions tOpt;
    auto* tr = profile->add_subcommand("transformer",
        "analytic profile of a decoder-only transformer (GPT-2, Llama, Mistral, Qwen2 and their relatives)");
    auto* hf = tr->add_option("--hf-config", tOpt.hf_config,
        "a Hugging Face config.json (gpt2, llama, mistral, qwen2): the model's shape; give --seq, --microbatch and "
        "--device beside it");
    auto shapeOption
        = [&](const char* name, auto& value, const char* help) { tr->add_option(name, value, help)->excludes(hf); };
    shapeOption("--layers", tOpt.layers, "transformer layers");
    shapeOption("--hidden", tOpt.hidden, "hidden size");
    shapeOption("--heads", tOpt.heads, "attention heads");
    shapeOption("--vocab", tOpt.vocab, "vocabulary size");
    shapeOption("--ffn-hidden", tOpt.ffn_hidden, "the MLP's inner size (default 4 x hidden)");
    shapeOption(
        "--kv-heads", tOpt.kv_heads, "key and value heads: grouped-query (< heads) or multi-query (1) attention");
    shapeOption("--mlp", tOpt.mlp, "gelu (GPT) | swiglu (Llama)");
    shapeOption("--norm", tOpt.norm, "layernorm (GPT) | rmsnorm (Llama)");
    shapeOption("--positions", tOpt.positions, "learned (GPT-2's table) | rotary (Llama: no parameters)");
    tr->add_flag("--untied-embeddings", tOpt.untied_embeddings, "the head has its own output projection (Llama)")
        ->excludes(hf);
    tr->add_flag("--no-bias", tOpt.no_bias, "no biases in products or norms (Llama)")->excludes(hf);
    tr->add_flag("--no-dropout", tOpt.no_dropout, "train without dropout (Llama): no dropout masks are kept")
        ->excludes(hf);
    tr->add_option("--attention", tOpt.attention,
          "flash (a flash kernel: no s x s scores kept, the default) | materialized (unfused, as Megatron before "
          "FlashAttention: the scores computed whole, kept for the backward)")
        ->check(CLI::IsMember({"flash", "materialized"}));
    tr->add_option("--cross-entropy", tOpt.cross_entropy,
          "fp32 (the loss's softmax on the logits cast to fp32, as Megatron and torchtitan do: the default) | native "
          "(one fused pass in the logits' precision)")
        ->check(CLI::IsMember({"fp32", "native"}));
    tr->add_option("--seq", tOpt.seq, "sequence length")->required();
    tr->add_option("--microbatch", tOpt.microbatch, "microbatch size")->required();
    tr->add_option("--device", tOpt.device, "device preset (H100, A100, V100, cpu, ...) or device-type JSON")
        ->required();
    auto* bytesOption = tr->add_option("--bytes-per-element", tOpt.bytes_per_element,
                              "2 for bf16/fp16, 4 for fp32 (default: what the engine trains in on --device: 4 on "
                              "cpu, which trains fp32 only, 2 on GPUs, bf16 mixed precision)")
                            ->check(CLI::IsMember(std::vector<int> {2, 4}));
    tr->add_option("--precision", tOpt.precision,
          "fp32 | bf16 | fp16 | fp8: the weights' precision, or fp8: 16-bit weights whose block products (QKV, "
          "projection, MLP) run in FP8 as Transformer Engine runs them (H100, H200, B200, MI300X)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
        ->excludes(bytesOption);
    tr->add_option("--efficiency", tOpt.efficiency,
        "time every layer by one share of peak (default: by shapes on H100/H200 in bf16, else 0.5)");
    tr->add_option("--gemm-table", tOpt.gemm_table,
        "time every matrix product by this GEMM table (pipewright-agent --profile-gemm) instead of the default curve");
    tr->add_option("-o,--output", tOpt.output, "model JSON to write")->required();
    tr->add_flag("--json", tOpt.json, "print a JSON summary");
    MeasureOptions mOpt;
    auto* measure = profile->add_subcommand("measure",
        "time every layer of a GPT-2 or a Llama on this machine with the training engine (pipewright-agent "
        "--profile)");
    measure->add_option("--layers", mOpt.layers, "transformer blocks");
    measure->add_option("--hidden", mOpt.hidden, "hidden size");
    measure->add_option("--heads", mOpt.heads, "attention heads");
    measure->add_option("--seq", mOpt.seq, "sequence length");
    measure->add_option("--vocab", mOpt.vocab, "vocabulary size");
    measure->add_option("--microbatch", mOpt.microbatch, "sequences per microbatch");
    measure->add_option("--plan", mOpt.plan, "take the shape and microbatch size from this plan's model instead");
    measure->add_option("--hf-config", mOpt.hf_config,
        "take the shape from a Hugging Face config.json instead (GPT-2, Llama, Mistral, Qwen2; with --seq and "
        "--microbatch)");
    measure->add_option("--threads", mOpt.threads, "BLAS threads (give what each agent of the run gets)")
        ->capture_default_str();
    measure->add_option("--repeats", mOpt.repeats, "timed passes (each layer's time is their median)")
        ->capture_default_str();
    measure->add_option("--warmup", mOpt.warmup, "untimed passes first")->capture_default_str();
    measure->add_option("--seed", mOpt.seed, "weights and tokens")->capture_default_str();
    measure
        ->add_option("--device", mOpt.device,
            "where to time the layers: cpu, or cuda[:N] (CUDA device N of those the agent sees; cuda = cuda:0)")
        ->capture_default_str()
        ->check(
            [](const std::string& device) -> std::string {
                return measureDeviceIndex(device) ? std::string() : "'" + device + "' is not cpu, cuda or cuda:N";
            },
            "DEVICE");
    measure
        ->add_option("--precision", mOpt.precision,
            "fp32, or bf16 (bf16 weights and activations, fp32 master weights: on a CUDA device only)")
        ->capture_default_str()
        ->check(CLI::IsMember({"fp32", "bf16"}));
    measure->add_option("-o,--output", mOpt.output, "model JSON to write")->required();
    measure->add_flag("--json", mOpt.json, "print a JSON summary");

    PlanOptions planOpt;
    auto* planCmd = app.add_subcommand("plan", "partition a model over a cluster and predict its schedule");
    addPlanOptions(planCmd, planOpt);

    SimulateOptions simOpt;
    auto* sim = app.add_subcommand("simulate", "simulate a plan's schedule");
    sim->add_option("plan", simOpt.plan, "plan JSON")->required();
    sim->add_option("--trace", simOpt.trace, "also write a Chrome trace (Perfetto) here");
    sim->add_option("--costs", simOpt.costs, "calibrated costs (`pipewright-cli calibrate`) instead of the profile's");
    sim->add_flag("--json", simOpt.json, "print the metrics as JSON");

    ExportOptions expOpt;
    auto* exp = app.add_subcommand("export", "export a plan's schedule or profile");
    exp->add_option("plan", expOpt.plan, "plan JSON")->required();
    // The other runtimes' formats come from the planner's registry of exporters (planner/export/export.h).
    std::vector<std::string> formats = {"chrome-trace", "actions-csv", "graph-txt", "schedule-json"};
    std::string runtimes;
    for (const auto* e : planner::planExporters()) {
        formats.emplace_back(e->name());
        runtimes += std::string(runtimes.empty() ? "" : " | ") + std::string(e->name());
    }
    exp->add_option("--format", expOpt.format,
           "chrome-trace | actions-csv | graph-txt | schedule-json (a file), or the files another runtime loads: "
               + runtimes + " (a directory)")
        ->required()
        ->check(CLI::IsMember(formats));
    exp->add_option("-o,--output", expOpt.output, "file to write (a directory for " + runtimes + ")")->required();
    exp->add_flag("--json", expOpt.json, "print a JSON summary");

    CompareOptions cmpOpt;
    auto* cmp = app.add_subcommand("compare", "run every applicable algorithm on one model and cluster, tabulate");
    cmp->add_option("--model", cmpOpt.model, "model profile: native JSON or PipeDream graph.txt")->required();
    cmp->add_option("--cluster", cmpOpt.cluster, "cluster JSON")->required();
    cmp->add_option("--algorithms", cmpOpt.algorithms, "comma-separated subset (default: all but manual)")
        ->delimiter(',');
    addSharedPartitionOptions(cmp, cmpOpt.partition);
    cmp->add_flag("--json", cmpOpt.json, "print the table as JSON");

    AdviseOptions advOpt;
    advOpt.partition.memory_limit = true;
    auto* adv = app.add_subcommand("advise", "which GPUs to rent: rank allocations by cost, time or both");
    adv->add_option("--model", advOpt.model, "model profile: native JSON or PipeDream graph.txt")->required();
    adv->add_option("--offers", advOpt.offers, "offers JSON: device types, counts, node shape, prices")->required();
    adv->add_option("--samples", advOpt.samples, "samples to train (for time and cost to train)")
        ->check(CLI::NonNegativeNumber);
    adv->add_option("--budget", advOpt.budget, "dollars: rank by time to train within the budget");
    adv->add_option("--deadline-hours", advOpt.deadline_hours, "rank by cost among allocations finishing in time");
    adv->add_option("--algorithms", advOpt.algorithms, "partitioners for one-type allocations (comma-separated)")
        ->delimiter(',');
    adv->add_option("--mixed-algorithms", advOpt.mixed_algorithms, "partitioners for two-type mixes")->delimiter(',');
    adv->add_flag("--no-mixes", advOpt.no_mixes, "only allocations of one device type");
    adv->add_option("--max-devices", advOpt.max_devices, "largest allocation considered")->capture_default_str();
    adv->add_option("--top", advOpt.top, "rows to print")->capture_default_str();
    addSharedPartitionOptions(adv, advOpt.partition);
    adv->add_flag("--json", advOpt.json, "print the ranking as JSON");

    bool algorithmsJson = false;
    auto* algoCmd = app.add_subcommand("algorithms", "list the partitioning algorithms and their options");
    algoCmd->add_flag("--json", algorithmsJson, "print the list as JSON");

    RunOptions runOpt;
    auto* runCmd = app.add_subcommand("run", "train a plan (made with `profile transformer`) with real agents");
    runCmd->add_option("plan", runOpt.plan, "plan JSON")->required();
    runCmd->add_flag("--local", runOpt.local, "one agent process per device on this machine");
    runCmd->add_option("--cluster", runOpt.cluster,
        "deploy over SSH to this cluster file's nodes (host, ssh_port, ssh_user, ssh_identity_file, env)");
    runCmd->add_option("--known-hosts", runOpt.known_hosts,
        "known_hosts file to check host keys against and record them in (default: .ssh/known_hosts in the "
        "account's home directory, from the password database, as OpenSSH uses)");
    runCmd->add_flag("--accept-new-host-keys", runOpt.accept_new_host_keys,
        "trust and record host keys known_hosts does not hold (a changed key is refused always)");
    runCmd->add_flag("--keep-run-dir", runOpt.keep_run_dir, "leave the run directories (logs, journals) on the hosts");
    runCmd->add_option("--remote-root", runOpt.remote_root,
        "where runs and agent builds go on the hosts (default: ~/.cache/pipewright of the SSH user)");
    runCmd->add_flag("--slurm", runOpt.slurm,
        "submit a Slurm batch job whose srun starts one agent per device; they connect back to this machine");
    runCmd->add_option("--partition", runOpt.partition, "with --slurm: the partition (default: Slurm's default)");
    runCmd->add_option("--account", runOpt.account, "with --slurm: the account to charge");
    runCmd->add_option("--time", runOpt.time, "with --slurm: the job's time limit, as sbatch takes it");
    runCmd->add_option("--sbatch-arg", runOpt.sbatch_args, "with --slurm: one more sbatch option (repeatable)")
        ->allow_extra_args(false);
    runCmd->add_option("--controller-address", runOpt.controller_address,
        "with --slurm: the address the compute nodes reach this machine at (default: its hostname)");
    runCmd->add_option("--slurm-dir", runOpt.slurm_dir,
        "with --slurm: where the run directories go, on a filesystem the nodes share (default: "
        "~/.cache/pipewright/slurm)");
    runCmd->add_option("--steps", runOpt.training.steps, "optimizer steps")->capture_default_str();
    runCmd->add_option("--data", runOpt.data, "llm.c token file or text file (default: a synthetic Markov corpus)");
    runCmd->add_option("--init", runOpt.init, "llm.c GPT-2 checkpoint (fp32) to start from");
    runCmd->add_option("--save", runOpt.save, "write the trained model as an llm.c checkpoint");
    runCmd->add_option("--lr", runOpt.training.lr, "learning rate (AdamW)")->capture_default_str();
    runCmd->add_option("--weight-decay", runOpt.training.weight_decay, "AdamW's decoupled weight decay")
        ->capture_default_str();
    runCmd->add_option("--warmup", runOpt.training.warmup_steps, "linear warm-up steps");
    runCmd->add_flag("--cosine", runOpt.training.cosine, "cosine decay after the warm-up");
    runCmd->add_option("--seed", runOpt.seed, "initialisation and synthetic data seed")->capture_default_str();
    runCmd->add_option("--threads", runOpt.threads, "CPU threads per agent (default: cores / agents)");
    runCmd->add_flag("--force", runOpt.force,
        "start a local run even with more agents or threads than cores, or predicted memory above the RAM");
    runCmd->add_option("--stop-on-nonfinite", runOpt.stop_on_nonfinite,
        "on (default): a NaN or infinite loss fails the run (exit 4) naming the step; off: train on");
    runCmd
        ->add_option("--stall-timeout", runOpt.stall_timeout_s,
            "seconds without any device finishing an action before the run counts as stalled: the report names the "
            "chain of waits and each agent's last actions are stored")
        ->capture_default_str();
    runCmd
        ->add_option(
            "--on-stall", runOpt.on_stall, "fail: a stall fails the run (default); wait: report it and wait on")
        ->check(CLI::IsMember({"fail", "wait"}));
    runCmd->add_option("--history", runOpt.history, "history SQLite file (default: the user's data directory)");
    runCmd->add_flag("--json", runOpt.json, "print the outcome as JSON");

    PreflightOptions preOpt;
    auto* pre = app.add_subcommand("preflight", "check every node of a cluster before a deployment");
    pre->add_option("cluster", preOpt.cluster,
           "cluster JSON (host, ssh_port, ssh_user, ssh_identity_file, env); with --slurm: the plan")
        ->required();
    pre->add_flag("--slurm", preOpt.slurm,
        "check that a Slurm partition holds the plan (sinfo, scontrol show node): nodes, CPUs, GPUs as Gres");
    pre->add_option("--partition", preOpt.partition, "with --slurm: the partition (default: Slurm's default)");
    pre->add_option("--plan", preOpt.plan, "check only the nodes and devices this plan uses");
    pre->add_option("--known-hosts", preOpt.known_hosts,
        "known_hosts file (default: .ssh/known_hosts in the account's home directory, from the password database)");
    pre->add_flag("--accept-new-host-keys", preOpt.accept_new_host_keys, "trust and record unknown host keys");
    pre->add_option("--remote-root", preOpt.remote_root,
        "where runs and agent builds go on the hosts (default: ~/.cache/pipewright of the SSH user)");
    pre->add_flag("--json", preOpt.json, "print the checks as JSON");

    TeardownOptions downOpt;
    auto* down = app.add_subcommand("teardown",
        "remove the run directories no agent uses any more (runs whose host was out of reach at their end, or whose "
        "controller died) from every node of a cluster");
    down->add_option("--cluster", downOpt.cluster, "cluster JSON (host, ssh_port, ssh_user, ssh_identity_file)")
        ->required();
    down->add_option("--known-hosts", downOpt.known_hosts,
        "known_hosts file (default: .ssh/known_hosts in the account's home directory, from the password database)");
    down->add_flag("--accept-new-host-keys", downOpt.accept_new_host_keys, "trust and record unknown host keys");
    down->add_option("--remote-root", downOpt.remote_root,
        "where runs and agent builds go on the hosts (default: ~/.cache/pipewright of the SSH user)");
    down->add_flag("--json", downOpt.json, "print what each node removed and kept as JSON");

    HistoryOptions histOpt;
    auto* hist = app.add_subcommand("history", "the runs this machine recorded");
    hist->require_subcommand(1);
    hist->add_option("--history", histOpt.history, "history SQLite file (default: the user's data directory)");
    auto* histList = hist->add_subcommand("list", "list runs, newest first");
    histList->add_option("--status", histOpt.status, "only runs of this status");
    histList->add_flag("--json", histOpt.json, "print JSON");
    auto* histShow
        = hist->add_subcommand("show", "a run: losses, predicted against measured per stage and per action kind");
    histShow->add_option("run", histOpt.run, "run id, a unique prefix of one, or latest")->required();
    histShow->add_option("--costs", histOpt.costs, "also the prediction of these calibrated costs against the run");
    histShow->add_flag("--json", histOpt.json, "print JSON");
    auto* histExport = hist->add_subcommand("export", "write a run's measured spans");
    histExport->add_option("run", histOpt.run, "run id, a unique prefix of one, or latest")->required();
    histExport->add_option("--format", histOpt.format, "csv | chrome-trace")
        ->check(CLI::IsMember({"csv", "chrome-trace"}))
        ->capture_default_str();
    histExport->add_option("-o,--output", histOpt.output, "file to write")->required();
    histExport->add_flag("--json", histOpt.json, "print what was written as JSON");
    auto* histCompare = hist->add_subcommand("compare",
        "several runs side by side: configuration differences, per-stage time and bubble deltas, metric summaries");
    histCompare->add_option("runs", histOpt.runs, "run ids (unique prefixes, or latest), two or more")->required();
    histCompare->add_flag("--json", histOpt.json, "print JSON");
    auto* histImport = hist->add_subcommand("import-trace",
        "record a torch.distributed.pipelining run of an exported plan from its ranks' PyTorch profiler traces");
    histImport->add_option("plan", histOpt.plan, "the plan the traces ran (exported with export --format torchtitan)")
        ->required();
    histImport->add_option("traces", histOpt.traces, "one Kineto JSON trace per pipeline rank, in rank order")
        ->required();
    histImport->add_option("--label", histOpt.label, "the run's label (default: the traces' names)");
    histImport->add_flag("--json", histOpt.json, "print the recorded run as JSON");
    auto* histDelete = hist->add_subcommand("delete", "delete a run and everything recorded about it");
    histDelete->add_option("run", histOpt.run, "run id, a unique prefix of one, or latest")->required();
    histDelete->add_flag("--json", histOpt.json, "print the deleted run's id as JSON");
    for (auto* sub : {histList, histShow, histExport, histDelete, histCompare, histImport})
        sub->add_option("--history", histOpt.history, "history SQLite file (default: the user's data directory)");

    CalibrateOptions calOpt;
    auto* cal = app.add_subcommand("calibrate", "fit a cost model to a recorded run's measured times");
    cal->add_option("run", calOpt.run, "run id, a unique prefix of one, or latest")->required();
    cal->add_option("-o,--output", calOpt.output, "costs JSON to write (for simulate/plan --costs)")->required();
    cal->add_option("--history", calOpt.history, "history SQLite file (default: the user's data directory)");
    cal->add_option("--statistic", calOpt.statistic,
           "a stage's time from its spans: median (robust to the odd slow span) or mean (what they add up to, "
           "better when processes share cores)")
        ->check(CLI::IsMember({"median", "mean"}))
        ->capture_default_str();
    cal->add_flag("--json", calOpt.json, "print the fit as JSON");

    bool demoJson = false;
    auto* demoCmd = app.add_subcommand("demo", "plan and simulate the bundled demo, print a summary");
    demoCmd->add_flag("--json", demoJson, "print the results as JSON");

    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
        app.parse(reversed);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0)
            return app.exit(e, out, err); // --help (of the selected subcommand) or --version
        err << "pipewright-cli: error: " << e.what() << "\n";
        return kExitUsage;
    }

    try {
        if (imp->parsed())
            importPipeDream(importOpt, out);
        else if (tr->parsed())
            transformer(tOpt, out);
        else if (measure->parsed())
            profileMeasure(mOpt, out);
        else if (planCmd->parsed())
            plan(planOpt, out);
        else if (sim->parsed())
            simulate(simOpt, out);
        else if (exp->parsed())
            exportPlan(expOpt, out);
        else if (adv->parsed())
            advise(advOpt, out);
        else if (cmp->parsed())
            compare(cmpOpt, out);
        else if (algoCmd->parsed())
            listAlgorithms(algorithmsJson, out);
        else if (demoCmd->parsed())
            demo(demoJson, out);
        else if (runCmd->parsed()) {
            try {
                return runPlan(runOpt, out, err);
            } catch (const planner::InputError& e) {
                // What the controller refuses in a field of the plan ("/schedule/kind", "/model/architecture")
                // is named with the plan's file.
                if (e.source().empty() && e.field().rfind('/', 0) == 0)
                    throw e.inFile(runOpt.plan);
                throw;
            }
        } else if (pre->parsed())
            return preflightCommand(preOpt, out, err);
        else if (down->parsed())
            return teardownCommand(downOpt, out, err);
        else if (cal->parsed())
            calibrate(calOpt, out);
        else if (histList->parsed())
            historyList(histOpt, out);
        else if (histShow->parsed())
            historyShow(histOpt, out);
        else if (histExport->parsed())
            historyExport(histOpt, out);
        else if (histDelete->parsed())
            historyDelete(histOpt, out);
        else if (histCompare->parsed())
            historyCompare(histOpt, out);
        else if (histImport->parsed())
            historyImportTrace(histOpt, out);
    } catch (const DoesNotFit& e) {
        err << "pipewright-cli: " << planner::formatInputError(e) << "\n";
        return kExitDoesNotFit;
    } catch (const UsageError& e) {
        err << "pipewright-cli: error: " << planner::formatInputError(e) << "\n";
        return kExitUsage;
    } catch (const planner::InputError& e) {
        err << "pipewright-cli: error: " << planner::formatInputError(e) << "\n";
        return kExitError;
    } catch (const std::exception& e) {
        err << "pipewright-cli: error: " << e.what() << "\n";
        return kExitError;
    }
    return kExitOk;
}

} // namespace pw::cli
