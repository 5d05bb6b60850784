#!/usr/bin/env bash
# Downloads a corpus of real ML training code that this project did not write: the source of widely used
# training libraries, as published on PyPI. Use it to measure speed and to hunt false positives.
#   usage: scripts/fetch-corpus.sh DEST      (about 25 MB to download, 100 MB of Python, 5,800 files)
set -euo pipefail
dest=${1:?usage: fetch-corpus.sh DEST}
mkdir -p "$dest/wheels" "$dest/src"
dest=$(cd "$dest" && pwd) # absolute: each archive is unpacked from inside its own folder
pkgs=(transformers==5.23.0 accelerate==1.15.0 trl==1.16.0 peft==0.21.2 lightning==2.6.6
      deepspeed==0.19.8 torchtune==0.6.1 diffusers==0.42.1)
for p in "${pkgs[@]}"; do
  name=${p%%==*}
  [ -d "$dest/src/$name" ] && continue
  python3 -m pip download --no-deps --quiet -d "$dest/wheels" "$p"
  mkdir -p "$dest/src/$name"
  f=$(ls "$dest"/wheels/"${name}"-* | head -n 1)
  case "$f" in
    *.whl) (cd "$dest/src/$name" && python3 -m zipfile -e "$f" .) ;;
    *.tar.gz) tar xzf "$f" -C "$dest/src/$name" ;;
  esac
done
echo "corpus ready: $dest/src ($(find "$dest/src" -name '*.py' | wc -l) Python files)"
