#!/usr/bin/env python3
"""A COLMAP capture whose train views were shot at other exposures, for measuring per-view
appearance (BENCHMARKS.md, issue 32).

    scripts/exposure-capture.py SOURCE OUT [--width 400] [--seed 42] [--exif]

Every photo is shrunk to --width pixels wide (JPEG quality 95). Each train view (every view
but every 8th in name order from the first, the eval split) has its light multiplied by a
gain k, log-uniform in 1/4-4 (two stops either way), times a factor in 0.85-1.15 for each
channel (white balance), in linear light: sRGB decoded, scaled, clipped, encoded again, as a
camera's sensor would see it. Python's random.seed(SEED) draws k, then r, g, b, for each view
in name order. The eval views are untouched. With --exif every photo says so in its EXIF, as a
camera on automatic exposure would: 1/100 s times k, f/1.8, ISO 100 (eval views 1/100 s).

Needs Pillow and piexif (pip install pillow piexif).
"""

import argparse
import math
import random
import shutil
from fractions import Fraction
from pathlib import Path

import piexif
from PIL import Image


def decode(v):
    v /= 255.0
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4


def encode(v):
    v = min(max(v, 0.0), 1.0)
    v = 12.92 * v if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055
    return round(v * 255.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--exif", action="store_true")
    args = parser.parse_args()

    random.seed(args.seed)
    (args.out / "images").mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.source / "sparse", args.out / "sparse", dirs_exist_ok=True)
    to_linear = [decode(v) for v in range(256)]
    photos = sorted((args.source / "images").iterdir())
    for index, photo in enumerate(photos):
        image = Image.open(photo).convert("RGB")
        height = round(image.height * args.width / image.width)
        image = image.resize((args.width, height), Image.LANCZOS)
        gain = 1.0
        if index % 8 != 0:
            gain = math.exp(math.log(0.25) + random.random() * math.log(16.0))
            channels = [gain * (0.85 + 0.3 * random.random()) for _ in range(3)]
            tables = [[encode(to_linear[v] * c) for v in range(256)] for c in channels]
            image = Image.merge(
                "RGB", [band.point(table) for band, table in zip(image.split(), tables)]
            )
        options = {"quality": 95}
        if args.exif:
            time = Fraction(gain / 100.0).limit_denominator(1_000_000)
            exif = {
                piexif.ExifIFD.ExposureTime: (time.numerator, time.denominator),
                piexif.ExifIFD.FNumber: (18, 10),
                piexif.ExifIFD.ISOSpeedRatings: 100,
            }
            options["exif"] = piexif.dump({"Exif": exif})
        image.save(args.out / "images" / photo.name, **options)
        print(f"{photo.name}: light x{gain:.3f}")


if __name__ == "__main__":
    main()
