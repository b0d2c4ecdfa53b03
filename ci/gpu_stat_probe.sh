export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=${SPECVERIFY_COMMIT:-unknown}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${T:-500} python -m specverify.cli check triton --profile nightly --device cuda -n ${N:-4} --deadline $((${T:-500}-20)) --checks token_distribution,acceptance_rate,synthetic_rate,accepted_length,sequence_distribution --json $OUT/stat.json > $OUT/stat.txt 2>&1; echo "rc=$?"
tail -5 $OUT/stat.txt
python - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/stat.json"))
for r in d["results"]:
    s = r.get("sampling") or {}
    det = r.get("detectable_by_position") or []
    print(f"{r['status']:5} {r['check']:22} {r['case']:18} copies={s.get('copies')} launches={s.get('launches')} "
          f"sps={s.get('samples_per_second') or 0:,.0f} share={s.get('backend_share') or 0:.2f} sec={r['seconds']:.1f} "
          f"det99={[round(x, 4) if isinstance(x, float) else x for x in det]}")
PY
