"""The documents answer_eval writes itself (bench/answer_corpora.py): a small company's office
files, and two documents in German and Spanish. Every fact a question is judged on is written
here once (bench/data/answer_eval/office.jsonl and foreign.jsonl name its substrings)."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

POLICY = [
    ("Remote Work Policy", None),
    ("Northwind Labs, version 3.2, approved by the People Team on 12 January 2026.", "p"),
    ("Eligibility", "h"),
    (
        "Every employee who has completed the 90-day probation period may work remotely up to four days a week. "
        "Roles that handle the reception desk or the hardware lab are excluded.",
        "p",
    ),
    ("Equipment stipend", "h"),
    (
        "Remote employees receive a one-time equipment stipend of 650 euros for a desk, a chair and a monitor. "
        "Receipts are submitted in Ledgerly within 30 days of purchase; the stipend is paid with the next salary.",
        "p",
    ),
    ("Core hours", "h"),
    (
        "Everyone is reachable between 10:00 and 15:00 Central European Time. Meetings outside core hours "
        "need the agreement of every attendee.",
        "p",
    ),
    ("Security", "h"),
    (
        "Company laptops must use full-disk encryption and connect through the Tailgate VPN on any network "
        "outside the office. Lost devices are reported to security@northwind.example within two hours.",
        "p",
    ),
    ("Working from abroad", "h"),
    (
        "Working from another country is allowed for at most 20 working days per calendar year and needs "
        "written approval from the line manager and the payroll team.",
        "p",
    ),
]

BUDGET = [
    ("Project", "Sponsor", "Owner", "Budget (EUR)", "Spent (EUR)", "Status"),
    ("Atlas data migration", "Dr Helen Okafor", "Marek Nowak", 180000, 142500, "On track"),
    ("Beacon customer portal", "Priya Raman", "Tomás Ortega", 95000, 101200, "Over budget"),
    ("Cobalt security audit", "Dr Helen Okafor", "Ingrid Solberg", 40000, 12000, "Not started"),
    ("Delta office fit-out", "James Whitfield", "Aiko Tanaka", 260000, 230750, "At risk"),
]

SLIDES = [
    (
        "Q3 All-Hands",
        ["Northwind Labs, 14 October 2026"],
        "Welcome everyone; remind remote staff that the recording will be shared on the intranet.",
    ),
    (
        "Revenue",
        ["Q3 revenue: 4.2 million euros, up 18 percent on Q2", "Three new enterprise customers"],
        "Mention that the Harbourline contract alone added 600,000 euros in annual revenue.",
    ),
    (
        "Hiring",
        ["12 people joined in Q3", "Open roles: 2 data engineers, 1 designer"],
        "The referral bonus rises to 3,000 euros from November for engineering roles.",
    ),
    (
        "Next quarter",
        ["Launch the Beacon customer portal", "Move the Leeds team to the new office"],
        "The Beacon launch date is 2 December; the press release is owned by Aiko Tanaka.",
    ),
]

MEMO = """FACILITIES MEMO - 3 February 2027
The Leeds office moves to 14 Wellington Street on 3 March 2027.
Desks are packed by the moving company Swiftcrate on 1 March.
Parking permits for the new building are issued by reception
on the second floor. The old building closes on 5 March 2027.
Questions go to Grace Holloway in Facilities."""

CONTACTS = [
    ("Office", "City", "Manager", "Phone", "Opened"),
    ("HQ", "Rotterdam", "Sanne de Vries", "+31 10 555 0100", "2014"),
    ("North", "Leeds", "Grace Holloway", "+44 113 555 0142", "2019"),
    ("South", "Valencia", "Lucía Ferrer", "+34 96 555 0177", "2021"),
    ("East", "Krakow", "Marek Nowak", "+48 12 555 0190", "2023"),
]

TRAVEL_DE = """# Reiserichtlinie der Northwind Labs GmbH

Gültig ab 1. April 2026. Diese Richtlinie gilt für alle Dienstreisen der Mitarbeiterinnen und Mitarbeiter.

## Verkehrsmittel

Dienstreisen mit der Bahn werden in der zweiten Klasse gebucht. Ab einer Fahrtzeit von mehr als vier Stunden ist die erste Klasse erlaubt. Flüge sind nur für Strecken über 600 Kilometer zulässig und werden in der Economy Class gebucht.

## Übernachtung

Hotelkosten werden bis 120 Euro pro Nacht erstattet, in München und Hamburg bis 150 Euro pro Nacht. Das Frühstück ist im Zimmerpreis enthalten oder wird von der Tagespauschale abgezogen.

## Verpflegung

Für jeden vollen Reisetag gibt es eine Tagespauschale von 28 Euro, für An- und Abreisetage 14 Euro.

## Abrechnung

Die Reisekostenabrechnung wird innerhalb von 14 Tagen nach Reiseende über das Portal Spesenfix eingereicht. Belege werden als Foto oder PDF hochgeladen. Fragen beantwortet die Buchhaltung unter reisen@northwind.example.
"""

ONBOARDING_ES = """# Guía de incorporación de Northwind Labs

Bienvenida a Northwind Labs. Esta guía explica tus primeras semanas en la oficina de Valencia.

## El primer día

El primer día llegas a las 9:30 a la recepción de la calle Colón 18. Allí te recibe tu compañero de bienvenida, que te acompaña durante el primer mes. El portátil se recoge en el departamento de TI, en la tercera planta.

## Formación obligatoria

Durante la primera semana completas el curso de seguridad de la información y el curso de protección de datos. Ambos cursos están en la plataforma Aprendo y duran unas dos horas cada uno.

## Periodo de prueba y vacaciones

El periodo de prueba es de seis meses. Cada año tienes 23 días laborables de vacaciones, que se solicitan en el portal de personal con al menos dos semanas de antelación.

## Horario

El horario es flexible entre las 8:00 y las 19:00, con presencia obligatoria en la oficina los martes y los jueves.
"""


def _policy_docx(path: Path) -> None:
    from docx import Document

    document = Document()
    for text, kind in POLICY:
        if kind is None:
            document.add_heading(text, level=0)
        elif kind == "h":
            document.add_heading(text, level=1)
        else:
            document.add_paragraph(text)
    document.save(path)


def _budget_xlsx(path: Path) -> None:
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Budget 2026"
    for row in BUDGET:
        sheet.append(list(row))
    workbook.save(path)


def _deck_pptx(path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    for title, bullets, notes in SLIDES:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            body.add_paragraph().text = bullet
        slide.notes_slide.notes_text_frame.text = notes
    deck.save(path)


def _scanned_png(path: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont

    font = (
        ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 30)
        if Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
        else ImageFont.load_default(size=30)
    )
    lines = [wrapped for line in MEMO.splitlines() for wrapped in textwrap.wrap(line, 70)]
    image = Image.new("L", (1400, 80 + 48 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((50, 40 + 48 * i), line, fill=20, font=font)
    image.save(path)


def _contacts_csv(path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(CONTACTS)


def office(dest: Path) -> None:
    _policy_docx(dest / "remote-work-policy.docx")
    _budget_xlsx(dest / "project-budget-2026.xlsx")
    _deck_pptx(dest / "q3-all-hands.pptx")
    _scanned_png(dest / "facilities-memo-scan.png")
    _contacts_csv(dest / "office-contacts.csv")


def foreign(dest: Path) -> None:
    (dest / "reiserichtlinie.md").write_text(TRAVEL_DE, encoding="utf-8")
    (dest / "guia-de-incorporacion.md").write_text(ONBOARDING_ES, encoding="utf-8")
