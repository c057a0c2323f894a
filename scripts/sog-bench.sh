#!/usr/bin/env bash
# SOG beside splat-transform (BENCHMARKS.md): sizes, encode times, and how close each SOG renders
# to the scene (mean PSNR of 4 turntable frames at 480x360, ImageMagick's compare), for four
# scenes of ../shared/data. Prints CSV.
#   cargo build --release && SPLAT_TRANSFORM=path/to/splat-transform scripts/sog-bench.sh [OUT]
set -u
cd "$(dirname "$0")/.."
B=${SPLATFORGE:-$PWD/target/release/splatforge}
ST=${SPLAT_TRANSFORM:-splat-transform}
D=${DATA:-$PWD/../shared/data/splats}
OUT=${1:-/tmp/sog-bench}; rm -rf $OUT; mkdir -p $OUT
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; local rc=$?; local e=$(date +%s.%N); echo "$(echo "$e - $s" | bc)"; return $rc; }
psnr() { # mean PSNR over frames of two folders
  local sum=0 n=0
  for f in $1/frame_*.png; do
    p=$(compare -metric PSNR "$f" "$2/$(basename $f)" null: 2>&1 | awk '{print $1}')
    [ "$p" = "inf" ] && p=99
    sum=$(echo "$sum + $p" | bc -l); n=$((n+1))
  done
  echo "scale=2; $sum / $n" | bc -l
}
echo "scene,splats,sh,ply_B,ours_sog_B,st_sog_B,ours_spz_B,st_cply_B,ours_sog_s,st_sog_s,ours_sog_psnr,st_sog_psnr,ours_spz_psnr"
for S in compressed-ply/biker.compressed.ply inria-ply/donut-sh0-no-normals.ply inria-ply/fruit-drops-extra-prop.ply inria-ply/lod2-tile-6831.ply; do
  name=$(basename $S); name=${name%%.*}; W=$OUT/$name; mkdir -p $W
  info=$($B info $D/$S 2>/dev/null); n=$(echo $info | python3 -c "import json,sys;d=json.load(sys.stdin);print(d['count'],d['sh_degree'])")
  $B convert $D/$S $W/orig.ply >/dev/null 2>&1
  to=$(t $B convert $D/$S $W/ours.sog)
  ts=$(t $ST -w -g cpu $D/$S $W/st.sog)
  $B convert $D/$S $W/ours.spz >/dev/null 2>&1
  $ST -w $D/$S $W/st.compressed.ply >/dev/null 2>&1
  for v in orig ours st; do
    src=$W/$v.ply; [ $v = ours ] && src=$W/ours.sog; [ $v = st ] && src=$W/st.sog
    $B render $src --turntable 1 --fps 4 --size 480x360 --out $W/frames_$v >/dev/null 2>&1
  done
  $B render $W/ours.spz --turntable 1 --fps 4 --size 480x360 --out $W/frames_spz >/dev/null 2>&1
  sz() { stat -c %s $1; }
  echo "$name,${n% *},${n#* },$(sz $W/orig.ply),$(sz $W/ours.sog),$(sz $W/st.sog),$(sz $W/ours.spz),$(sz $W/st.compressed.ply),$to,$ts,$(psnr $W/frames_orig $W/frames_ours),$(psnr $W/frames_orig $W/frames_st),$(psnr $W/frames_orig $W/frames_spz)"
done
