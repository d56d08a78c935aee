"""`builder fit` on the terminal: one row per record, then the newest that fits."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from builder.fit.host import FitHost
from builder.ui.terminal import emit_json, out
from builder.ui.text import markup
from builder.usecases.doctor import ImageFit
from builder.usecases.fit import FitReport

_STYLE = {"fits": "green", "does not fit": "red", "unknown": "yellow"}


def _host_title(host: FitHost) -> str:
    gpus = ", ".join(host.gpus) or "none"
    if host.vendor == "amd":  # the kernel and its amdgpu module are the driver a ROCm image meets
        amdgpu = f"amdgpu {host.amdgpu}" if host.amdgpu else "amdgpu version unknown"
        return f"fit on {host.arch}, amd GPUs: {gpus}, kernel: {host.kernel or 'unknown'} ({amdgpu})"
    return f"fit on {host.arch}, {host.vendor} GPUs: {gpus}, driver: {host.driver or 'unknown'}"


def print_fit(out: Console, report: FitReport) -> None:
    title = _host_title(report.host)
    table = Table(title=markup(title), title_justify="left")
    for column in ("image" if report.catalog else "library", "fit", "reason"):
        table.add_column(column, overflow="fold")
    for row in report.records:
        table.add_row(markup(row.id), f"[{_STYLE[row.status]}]{row.status}[/]", markup(row.reason))
    out.print(table)
    if not report.catalog:
        left = [row.id for row in report.records if row.status != "fits"]
        out.print(markup(f"not all fit this host: {', '.join(left)}") if left else "all fit this host")
    elif report.newest_fit and report.planned:
        out.print(markup(f"newest planned image that fits: {report.newest_fit} (builder build --select id={report.newest_fit})"))
    elif report.newest_fit:
        out.print(markup(f"newest that fits: {report.newest_fit} (builder pull id={report.newest_fit})"))
    else:
        out.print("nothing matching fits this host")


def print_image_fit(out: Console, result: ImageFit) -> None:
    """`builder doctor --image`: the host, then the image's verdict and what it runs on."""
    out.print(markup(_host_title(result.host)))
    fit = result.fit
    out.print(f"{markup(result.ref)} ({markup(result.image.id)}): [{_STYLE[fit.status]}]{fit.status}[/]: {markup(fit.reason)}")
    out.print(markup(f"runs on: {result.runs_on.label}"))


def show_fit(report: FitReport, fmt: str) -> None:
    if fmt == "json":
        emit_json(report.to_json())
    else:
        print_fit(out, report)


def show_image_fit(result: ImageFit, fmt: str) -> None:
    if fmt == "json":
        emit_json(result.to_json())
    else:
        print_image_fit(out, result)
