// SPDX-License-Identifier: MIT
// The deploy dialog's Slurm choice (offscreen): choosing it shows the Slurm fields instead of the SSH ones, what is
// typed there becomes the launcher's options (extra sbatch options one word each), and Check without a plan says so
// instead of submitting anything.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTest>

#include "ui/widgets/deploy_dialog.h"

using namespace pw;

namespace {

/// The dialog's line edit whose placeholder starts with `placeholder`.
QLineEdit* field(ui::DeployDialog& d, const QString& placeholder)
{
    for (auto* e : d.findChildren<QLineEdit*>())
        if (e->placeholderText().startsWith(placeholder))
            return e;
    FAIL("no field with the placeholder " << placeholder.toStdString());
    return nullptr;
}

} // namespace

TEST_CASE("deploy dialog: the Slurm choice turns its fields into the launcher's options", "[ui][slurm]")
{
    ui::DeployDialog d;
    d.show();
    CHECK_FALSE(d.usesSlurm());
    QLineEdit* partition = field(d, QStringLiteral("Slurm's default partition"));
    QLineEdit* clusterFile = field(d, QStringLiteral("cluster JSON"));
    CHECK_FALSE(partition->isVisible());
    CHECK(clusterFile->isVisible());

    auto* launcher = d.findChild<QComboBox*>();
    REQUIRE(launcher);
    launcher->setCurrentIndex(1); // as the user picks "Slurm batch job"
    CHECK(d.usesSlurm());
    CHECK(partition->isVisible());
    CHECK_FALSE(clusterFile->isVisible());
    CHECK(d.windowTitle() == QStringLiteral("Deploy with Slurm"));

    QTest::keyClicks(partition, QStringLiteral("gpu"));
    QTest::keyClicks(field(d, QStringLiteral("your default account")), QStringLiteral("proj42"));
    QTest::keyClicks(field(d, QStringLiteral("the partition's default")), QStringLiteral("2:00:00"));
    QTest::keyClicks(field(d, QStringLiteral("more sbatch options")), QStringLiteral(" --qos=high   --exclusive "));
    QTest::keyClicks(field(d, QStringLiteral("this machine's hostname")), QStringLiteral("login1.example"));
    app::SlurmOptions expected;
    expected.partition = "gpu";
    expected.account = "proj42";
    expected.time = "2:00:00";
    expected.sbatch_args = {"--qos=high", "--exclusive"};
    expected.controller_address = "login1.example";
    CHECK(d.slurmOptions() == expected);

    // The options set back into the fields read the same.
    ui::DeployDialog other;
    other.setSlurm(true);
    other.setSlurmOptions(expected);
    CHECK(other.slurmOptions() == expected);

    // Without a plan there is nothing to check the partition against: nothing is asked of Slurm, Deploy stays off.
    d.check();
    CHECK_FALSE(d.deployButton()->isEnabled());
    bool said = false;
    for (auto* label : d.findChildren<QLabel*>())
        said = said || label->text().contains(QStringLiteral("no plan to check against the partition"));
    CHECK(said);
    CHECK(d.checks().empty());
}
