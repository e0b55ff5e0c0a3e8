"""The report as a reader sees it: report.html and conversation pages of a real (tiny) run, opened
in headless Chromium (Debian package `chromium`, driven by Playwright for Python through its
executable path; Playwright's own browser downloads are never used).

Checked: no console errors, every internal link and every referenced file resolves, every figure
loads, no table hides columns beyond a 1280-pixel-wide window, and the conversation page's
player (stereo mix beside the page, playhead over the timeline, click a scored window to seek)
works, also when the audio file is missing. Screenshots go to the test's tmp folder. Skips,
saying why, where Chromium or Playwright is absent (`make setup` installs both).
"""

from __future__ import annotations

import io
import os
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
import soundfile as sf

from harness.products.infer import InferRecord
from harness.protocol.scheduler import Placement
from harness.report.conversation import mix_flac, stereo_mix

WIDTH = 1280
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """``CHROMIUM`` from the environment, else Debian's binary (the real one, not the
    /usr/bin/chromium wrapper script), else one on PATH."""
    for c in (os.environ.get("CHROMIUM"), *CHROMIUM_CANDIDATES):
        if not c:
            continue
        path = c if os.path.isabs(c) else shutil.which(c)
        if path and os.access(path, os.X_OK):
            return path
    return None


# -- fast: the mix and the page markup, no browser -------------------------------------------------
def test_stereo_mix_puts_humans_left_and_the_model_right():
    rec = InferRecord("x", "ok", "", 24_000, 100, None, (Placement(None, 0, 10), Placement(0, 20, 30),
                                                         Placement(1, 90, 30)), ())  # the last runs past the end
    pre, t0, t1 = (np.full(10, 0.1, np.float32), np.full(30, 0.2, np.float32), np.full(30, 0.3, np.float32))
    out = np.linspace(-0.5, 0.5, 100).astype(np.float32)
    mix = stereo_mix(rec, [t0, t1], pre, out)
    assert mix.shape == (100, 2) and mix.dtype == np.float32
    assert np.allclose(mix[:10, 0], 0.1) and np.allclose(mix[20:50, 0], 0.2) and np.allclose(mix[90:, 0], 0.3)
    assert not mix[10:20, 0].any() and not mix[50:90, 0].any()
    assert np.array_equal(mix[:, 1], out)
    silent_model = stereo_mix(rec, [t0, t1], pre, None)
    assert not silent_model[:, 1].any()
    pcm, sr = sf.read(io.BytesIO(mix_flac(mix, 24_000)), dtype="float32", always_2d=True)
    assert sr == 24_000 and pcm.shape == (100, 2) and np.allclose(pcm, mix, atol=1 / 32767)


# -- slow: a tiny run, then the browser --------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium is not installed (Debian package `chromium`: `make setup` installs it)")
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (requirements-dev.txt: `make setup`)")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=path, args=["--autoplay-policy=no-user-gesture-required",
                                                              "--mute-audio"])
        except Error as e:
            pytest.skip(f"Chromium at {path} did not start: {str(e)[:300]}")
        yield b
        b.close()


@pytest.fixture
def report_dir(completed_run) -> Path:
    """The shared tiny run's reduce folder (report.html, figures, conversation pages and their audio)."""
    assert completed_run.store.exists(completed_run.report_key)
    return completed_run.root / completed_run.plan.reduce


def _open(browser, url: str, shot: Path, ignore_missing: str | None = None):
    """The page at ``url`` in a 1280-px window, with its console errors and page errors."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.goto(url, wait_until="load")
    page.wait_for_timeout(300)
    page.screenshot(path=str(shot), full_page=True)
    if ignore_missing:  # the browser's own note that a file is missing (the test removed it)
        errors = [e for e in errors if "ERR_FILE_NOT_FOUND" not in e]
    return page, errors


def _check_page(page, html_file: Path) -> dict:
    """Links, referenced files, figures and tables of an open page; returns what it found."""
    found = page.evaluate("""() => ({
      links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
      ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
      media: Array.from(document.querySelectorAll('img[src], audio[src], source[src]')).map(e => e.getAttribute('src')),
      images: Array.from(document.images).map(i => ({ok: i.complete && i.naturalWidth > 0, w: i.naturalWidth,
                                                      alt: (i.alt || '').slice(0, 60)})),
      viewport: document.documentElement.clientWidth,
      pageWidth: document.documentElement.scrollWidth,
      tables: Array.from(document.querySelectorAll('table')).map((t, k) => {
        const r = t.getBoundingClientRect(), box = t.parentElement;
        const cells = Array.from(t.querySelectorAll('tr:first-child > *'));
        return {k, right: r.right, left: r.left, scroll: box.scrollWidth, client: box.clientWidth,
                head: cells.map(c => c.textContent).join(' | ').slice(0, 120),
                lastRight: cells.length ? cells[cells.length - 1].getBoundingClientRect().right : 0};
      }),
    })""")
    ids = set(found["ids"])
    for href in found["links"] + found["media"]:
        parts = urlsplit(href)
        if parts.scheme in ("http", "https", "mailto", "data"):
            assert parts.scheme == "data", f"{html_file.name}: external link {href!r}"
            continue
        if parts.path:
            target = (html_file.parent / unquote(parts.path)).resolve()
            assert target.is_file(), f"{html_file.name}: {href!r} points to a missing file"
        elif parts.fragment:
            assert parts.fragment in ids, f"{html_file.name}: anchor {href!r} has no target"
    assert found["images"], f"{html_file.name}: no figure"
    for img in found["images"]:
        assert img["ok"], f"{html_file.name}: figure {img['alt']!r} did not load"
    vw = found["viewport"]
    assert found["pageWidth"] <= vw, f"{html_file.name}: the page is {found['pageWidth']} px wide in a {vw} px window"
    for t in found["tables"]:
        hidden = t["scroll"] > t["client"] + 1 or t["right"] > vw + 0.5 or t["lastRight"] > vw + 0.5
        assert not hidden, f"{html_file.name}: table {t['k']} ({t['head']}) hides columns beyond {vw} px: {t}"
    return found


def test_report_and_a_conversation_page_in_chromium(browser, report_dir, tmp_path):
    t0 = time.monotonic()
    report = report_dir / "report.html"
    page, errors = _open(browser, report.as_uri(), tmp_path / "report.png")
    assert not errors, errors
    found = _check_page(page, report)
    conv_links = [h for h in found["links"] if h.startswith("conversations/")]
    assert conv_links, "report.html links no conversation page"
    page.close()
    for href in conv_links:  # every linked conversation page loads cleanly
        html_file = report_dir / unquote(href)
        page, errors = _open(browser, html_file.as_uri(), tmp_path / f"{html_file.parent.name}-{html_file.stem}.png")
        assert not errors, (href, errors)
        _check_page(page, html_file)
        page.close()
    print(f"\nbrowser check of report.html and {len(conv_links)} conversation pages: {time.monotonic() - t0:.1f} s; "
          f"screenshots in {tmp_path}")


def test_conversation_player_plays_seeks_and_survives_a_missing_file(browser, report_dir, tmp_path):
    pages = sorted((report_dir / "conversations" / "oracle").glob("*.html"))
    assert pages
    html_file = pages[0]
    flac = html_file.with_suffix(".flac")
    data, sr = sf.read(flac, always_2d=True)
    assert data.shape[1] == 2 and np.abs(data[:, 0]).max() > 0.01 and np.abs(data[:, 1]).max() > 0.01
    page, errors = _open(browser, html_file.as_uri(), tmp_path / "player.png")
    assert not errors, errors
    page.wait_for_function("document.getElementById('mix').readyState >= 1", timeout=10_000)
    duration = page.evaluate("document.getElementById('mix').duration")
    assert abs(duration - len(data) / sr) < 0.05
    rows = page.locator("tr.seek")
    assert rows.count() >= 3  # every scored window can be clicked
    target = rows.nth(rows.count() // 2)
    start = float(target.get_attribute("data-start"))
    target.click()
    page.wait_for_function("document.getElementById('mix').currentTime > 0", timeout=10_000)
    now = page.evaluate("document.getElementById('mix').currentTime")
    assert start - 0.01 <= now < start + 2.0
    page.evaluate("document.getElementById('mix').pause()")
    head = page.evaluate("""() => {
      const h = document.querySelector('.playhead'), i = document.querySelector('#fig-timeline img');
      const a = h.getBoundingClientRect(), b = i.getBoundingClientRect();
      return {shown: getComputedStyle(h).display !== 'none', x: a.left, l: b.left, r: b.right, t: a.top, bt: b.top,
              bb: b.bottom}; }""")
    assert head["shown"] and head["l"] < head["x"] < head["r"] and head["bt"] <= head["t"] < head["bb"]
    page.screenshot(path=str(tmp_path / "player-seeked.png"), full_page=False)
    # the figure seeks too: a click at 10 % of the time axis
    geo = page.evaluate("JSON.parse(document.getElementById('timeline-geometry').textContent)")
    img = page.locator("#fig-timeline img")
    img.scroll_into_view_if_needed()
    box = img.bounding_box()
    img.click(position={"x": box["width"] * (geo["x0"] + 0.1 * (geo["x1"] - geo["x0"])),
                        "y": box["height"] * (1 - (geo["y0"] + geo["y1"]) / 2)})
    want = geo["t0"] + 0.1 * (geo["t1"] - geo["t0"])
    page.wait_for_function(f"Math.abs(document.getElementById('mix').currentTime - {want}) < 1.0", timeout=10_000)
    page.close()

    # without its audio file the page stays usable: the player gives way to a note
    alone = tmp_path / "copied"
    alone.mkdir()
    shutil.copy(html_file, alone / html_file.name)
    page, errors = _open(browser, (alone / html_file.name).as_uri(), tmp_path / "player-missing.png",
                         ignore_missing=flac.name)
    assert not errors, errors
    page.wait_for_selector("#listen.missing", timeout=10_000)
    assert "Audio not available" in page.inner_text("#listen")
    assert page.locator("table").count() >= 3 and page.evaluate("document.images[0].naturalWidth") > 0
    page.locator("tr.seek").first.click()  # nothing happens, nothing breaks
    page.wait_for_timeout(200)
    assert not errors, errors
    page.close()
