-- inspect: a lock's state for Client.Inspect; it writes nothing. The
-- function state comes first (see state.lua for KEYS and the reply).
local info, err = state()
if err then
  return err
end
return info
