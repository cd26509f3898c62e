#!/usr/bin/env bash
# Makes phrase.opus, the voice of `model-speaks`: a phrase synthesized by espeak-ng and
# encoded by opusenc in 20 ms packets (what WebRTC sends), committed so that building
# and testing need neither tool. Run it again after changing the words.
set -euo pipefail
cd "$(dirname "$0")"
command -v espeak-ng >/dev/null && command -v opusenc >/dev/null ||
  apt-get install -y -q espeak-ng opus-tools
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
espeak-ng -v en-us -s 150 -w "$scratch/phrase.wav" "Hello. This is the model speaking. I heard you."
opusenc --quiet --bitrate 24 --framesize 20 --hard-cbr --downmix-mono "$scratch/phrase.wav" phrase.opus
echo "phrase.opus: $(stat -c %s phrase.opus) bytes"
