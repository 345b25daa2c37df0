// SPDX-License-Identifier: MIT
// One QApplication (offscreen unless a platform is chosen) for every widget test, made by a listener before the
// first test runs. Catch2's own main comes precompiled with Catch2::Catch2WithMain: a main of our own compiled
// Catch2's whole implementation again, the slowest file of the build (16 s; issue 30 item 19).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <QApplication>
#include <QTemporaryDir>
#include <memory>

namespace {

struct QtApplication : Catch::TestEventListenerBase
{
    using TestEventListenerBase::TestEventListenerBase;

    void testRunStarting(const Catch::TestRunInfo& info) override
    {
        TestEventListenerBase::testRunStarting(info);
        if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
            qputenv("QT_QPA_PLATFORM", "offscreen");
        // Settings, data files and the run history (app::defaultHistoryPath() follows XDG_DATA_HOME) go to a
        // directory of this process, never the user's, and never one that tests running in parallel share: ctest
        // runs each test case as its own process, and a layout saved by one must not reach another.
        data = std::make_unique<QTemporaryDir>();
        for (const char* name : {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"})
            qputenv(name, (data->path() + QLatin1Char('/') + QString::fromLatin1(name)).toLocal8Bit());
        app = std::make_unique<QApplication>(argc, argv);
        QApplication::setOrganizationName("pipewright-tests");
    }

    void testRunEnded(const Catch::TestRunStats& stats) override
    {
        app.reset();
        data.reset();
        TestEventListenerBase::testRunEnded(stats);
    }

    // QApplication keeps references to these for its lifetime.
    int argc = 1;
    char name[12] = "pw_ui_tests";
    char* argv[2] = {name, nullptr};
    std::unique_ptr<QTemporaryDir> data;
    std::unique_ptr<QApplication> app;
};

} // namespace

CATCH_REGISTER_LISTENER(QtApplication)
