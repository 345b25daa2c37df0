// SPDX-License-Identifier: MIT
// A one-line label that never sets its window's width: too long a text is shortened with "…", the whole text in a
// tooltip.
#pragma once

#include <QLabel>

namespace pw::ui {

/// @brief A QLabel for texts of any length in a layout that must fit small windows.
///
/// Its minimum width is a few characters, not its text's; when the label is narrower than its text, it shows the
/// text elided (at `mode`) and the tooltip shows it whole. fullText() is the text as set.
class ElidedLabel : public QLabel
{
    Q_OBJECT

public:
    explicit ElidedLabel(QWidget* parent = nullptr, Qt::TextElideMode mode = Qt::ElideRight);

    void setFullText(const QString& text);
    const QString& fullText() const { return m_full; }
    /// Whether the text is shown shortened now.
    bool elided() const { return text() != m_full; }

    QSize minimumSizeHint() const override;
    QSize sizeHint() const override;

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void elide();

    QString m_full;
    Qt::TextElideMode m_mode;
};

} // namespace pw::ui
