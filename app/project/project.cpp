// SPDX-License-Identifier: MIT
#include "project.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/json_fields.h"

namespace pw::app {

using nlohmann::json;
using planner::InputError;
namespace f = planner::fields;

namespace {

/// Runs `parse`, prefixing the JSON path of the errors it throws with `prefix`.
template <typename Fn> auto nested(const std::string& prefix, Fn&& parse)
{
    try {
        return parse();
    } catch (const InputError& e) {
        throw InputError({}, 0, prefix + e.field(), e.message());
    }
}

} // namespace

void Project::validate() const
{
    std::set<std::string> names;
    for (std::size_t i = 0; i < scenarios.size(); ++i) {
        const auto path = "/scenarios/" + std::to_string(i) + "/name";
        if (scenarios[i].name.empty())
            throw InputError({}, 0, path, "a scenario needs a name");
        if (!names.insert(scenarios[i].name).second)
            throw InputError({}, 0, path, "two scenarios are named '" + scenarios[i].name + "'");
    }
    if (plan) {
        if (plan->model != model)
            throw InputError({}, 0, "/plan/model", "the current plan was made for another model than the project's");
        if (plan->cluster != cluster)
            throw InputError(
                {}, 0, "/plan/cluster", "the current plan was made for another cluster than the project's");
        nested("/plan", [&] { plan->validate(); });
    }
}

int Project::findScenario(const std::string& name) const
{
    for (std::size_t i = 0; i < scenarios.size(); ++i)
        if (scenarios[i].name == name)
            return static_cast<int>(i);
    return -1;
}

json toJson(const Project& project)
{
    json scenarios = json::array();
    for (const auto& s : project.scenarios) {
        scenarios.push_back({{"name", s.name}, {"plan", planner::toJson(s.plan)}});
        if (!s.note.empty())
            scenarios.back()["note"] = s.note;
    }
    json j = {{"format_version", kProjectFormatVersion}, {"kind", "pipewright-project"}, {"name", project.name},
        {"model", planner::toJson(project.model)}, {"cluster", planner::toJson(project.cluster)},
        {"partition",
            {{"algorithm", project.partition.algorithm}, {"params", project.partition.params},
                {"schedule", planner::toJson(project.partition.schedule)}}},
        {"scenarios", std::move(scenarios)}};
    if (project.plan)
        j["plan"] = planner::toJson(*project.plan);
    return j;
}

Project projectFromJson(const json& j)
{
    f::object(j, "");
    f::checkVersion(j, "project", kProjectFormatVersion);
    if (f::stringOr(j, "kind", "", "pipewright-project") != "pipewright-project")
        f::fail("/kind", "not a Pipewright project (expected \"pipewright-project\")");
    Project p;
    p.name = f::stringOr(j, "name", "", "");
    p.model = nested("/model", [&] { return planner::modelFromJson(f::required(j, "model", "")); });
    p.cluster = nested("/cluster", [&] { return planner::clusterFromJson(f::required(j, "cluster", "")); });
    if (j.contains("plan") && !j.at("plan").is_null())
        p.plan = nested("/plan", [&] { return planner::planFromJson(j.at("plan")); });
    if (j.contains("partition")) {
        const auto& jp = f::object(j.at("partition"), "/partition");
        p.partition.algorithm = f::stringOr(jp, "algorithm", "/partition", p.partition.algorithm);
        if (jp.contains("params"))
            p.partition.params = f::object(jp.at("params"), "/partition/params");
        if (jp.contains("schedule"))
            p.partition.schedule = planner::scheduleOptionsFromJson(jp.at("schedule"), "/partition/schedule");
    }
    if (j.contains("scenarios")) {
        const auto& list = f::array(j, "scenarios", "");
        for (std::size_t i = 0; i < list.size(); ++i) {
            const auto path = "/scenarios/" + std::to_string(i);
            const auto& js = f::object(list[i], path);
            Scenario s;
            s.name = f::string(js, "name", path);
            s.note = f::stringOr(js, "note", path, "");
            s.plan = nested(path + "/plan", [&] { return planner::planFromJson(f::required(js, "plan", path)); });
            p.scenarios.push_back(std::move(s));
        }
    }
    p.validate();
    return p;
}

Project loadProject(const std::string& path)
{
    Project p;
    planner::convertJsonFile(path, [&](const json& j) { p = projectFromJson(j); });
    return p;
}

void saveProject(const std::string& path, const Project& project)
{
    project.validate();
    // Written next to the target and renamed over it: a failed or interrupted save leaves the old file.
    const std::string temporary = path + ".saving";
    planner::writeJsonFile(temporary, toJson(project), 1);
    std::error_code ec;
    std::filesystem::rename(temporary, path, ec);
    if (ec) {
        std::remove(temporary.c_str());
        throw InputError(path, 0, "", "cannot replace the project file: " + ec.message());
    }
}

Project newProject(planner::ModelProfile model, planner::Cluster cluster)
{
    Project p;
    p.name = model.name;
    p.model = std::move(model);
    p.cluster = std::move(cluster);
    return p;
}

} // namespace pw::app
