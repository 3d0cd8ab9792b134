-- wrk script: POST /v1/holds with confirm=true over the pools named in the environment variable
-- STOCKD_BENCH_POOLS (comma separated), one unit each, a unique hold_id per request.
local thread_seq = 0
counter = 0

function setup(thread)
  thread_seq = thread_seq + 1
  thread:set("prefix", string.format("x%d-%d-", os.time(), thread_seq))
end

function init(args)
  local items = {}
  for pool in string.gmatch(os.getenv("STOCKD_BENCH_POOLS") or "hot", "[^,]+") do
    items[#items + 1] = '{"pool":"' .. pool .. '","qty":1}'
  end
  items_json = "[" .. table.concat(items, ",") .. "]"
end

request = function()
  counter = counter + 1
  local body = '{"hold_id":"' .. prefix .. counter .. '","items":' .. items_json ..
      ',"confirm":true}'
  return wrk.format("POST", "/v1/holds", {["Content-Type"] = "application/json"}, body)
end
