-- Seed data of the "Bit Select" demo shop, from the two source articles:
-- order 88231 (robot vacuum, delivered, SF1234567890 signed for by the
-- recipient on 22 June) and order 99001 (earbuds, still on the road) from
-- article 003; order 88239 (an iPhone 18 Pro Max, paid, not shipped: the
-- order the customer cancels) and the five skills' tools from article 000.
-- All orders belong to the one demo customer, u1001.

-- The articles' "now": the shop's clock starts at 14:00 on Monday 29 June
-- 2026 (shop time) when the database is made, whatever the machine's date,
-- so that the seed reads as in the articles: 88231, delivered on 22 June, is
-- within the 7-day return window, coupons C001-C003 valid, the first refund
-- RF20260629001. datetime('now') is UTC; the shop is UTC+08:00.
INSERT INTO shop_clock VALUES (1, '2026-06-29 14:00:00', datetime('now', '+8 hours'));

INSERT INTO customers VALUES
    ('u1001', 'Zhang Wei', 'gold', 3280, '138****6621',
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong');

INSERT INTO products VALUES
    ('P1001', 'Bit S10 Pro robot vacuum', 'robot_vacuum',
     'robot vacuum cleaner sweeper s10 扫地机 扫地机器人', 299900, 120,
     'Robot vacuum with 6000 Pa suction, LiDAR navigation and an auto-empty dock.'),
    ('P1002', 'Bit AirX wireless earbuds', 'headphones',
     'airx earbuds earphones headphones bluetooth 耳机 蓝牙耳机', 49900, 300,
     'True wireless earbuds with active noise cancelling and 30 hours of battery with the case.'),
    ('P1003', 'Bit BandPro over-ear headphones', 'headphones',
     'bandpro headphones headset over-ear 耳机 头戴式耳机', 89900, 80,
     'Over-ear headphones with hybrid noise cancelling and 50 hours of battery.'),
    ('P1004', 'Bit Watch S3 smartwatch', 'wearables',
     'watch smartwatch wearable 手表 智能手表', 129900, 60,
     'Smartwatch with heart-rate, SpO2 and sleep tracking; pairs with Android and iOS phones.'),
    ('P1005', 'iPhone 18 Pro Max 256GB', 'phones',
     'iphone apple phone smartphone 手机 苹果', 999900, 15,
     'Apple iPhone 18 Pro Max with 256 GB of storage.'),
    ('P1006', 'Bit smart plug mini', 'smart_home',
     'plug socket smart home iot 插座 智能插座', 5900, 500,
     'Wi-Fi smart plug with energy monitoring and schedules in the Bit Home app.'),
    ('P1007', 'Bit S10 Pro filter kit', 'accessories',
     'filter hepa side brush accessory spare s10 滤网 边刷 配件', 3900, 1000,
     'Two HEPA filters and one side brush for the Bit S10 Pro robot vacuum.');

INSERT INTO coupons VALUES
    ('C001', 'u1001', 'CNY 100 off orders over CNY 1000', 10000, 100000, '2026-07-31', NULL),
    ('C002', 'u1001', 'CNY 10 off orders over CNY 50', 1000, 5000, '2026-07-15', NULL),
    ('C003', 'u1001', 'CNY 100 off orders over CNY 5000', 10000, 500000, '2026-08-31', '88239'),
    ('C004', 'u1001', 'CNY 30 off orders over CNY 300', 3000, 30000, '2026-06-01', NULL);

INSERT INTO orders VALUES
    ('88231', 'u1001', 299900, 'delivered', 'SF1234567890',
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     NULL, 'alipay', NULL, '2026-06-18 10:21:00'),
    ('99001', 'u1001', 49900, 'shipped', 'YT9876543210',
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     NULL, 'wechat_pay', NULL, '2026-06-26 20:05:00'),
    ('88239', 'u1001', 989900, 'paid', NULL,
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     'C003', 'card', NULL, '2026-06-28 09:12:00'),
    ('88240', 'u1001', 89900, 'pending_payment', NULL,
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     NULL, NULL, NULL, '2026-06-29 08:30:00'),
    ('66012', 'u1001', 129900, 'cancelled', NULL,
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     NULL, NULL, 'changed my mind', '2026-06-10 21:47:00'),
    ('55008', 'u1001', 11800, 'refunded', 'SF1122334455',
     'Room 1203, Building 5, 88 Keyuan Road, Nanshan District, Shenzhen, Guangdong',
     NULL, 'alipay', NULL, '2026-06-05 13:02:00');

INSERT INTO order_items VALUES
    ('88231', 'P1001', 1, 299900),
    ('99001', 'P1002', 1, 49900),
    ('88239', 'P1005', 1, 999900),
    ('88240', 'P1003', 1, 89900),
    ('66012', 'P1004', 1, 129900),
    ('55008', 'P1006', 2, 5900);

INSERT INTO logistics VALUES
    ('SF1234567890', 'SF Express', 'delivered', 'the recipient, in person'),
    ('YT9876543210', 'YTO Express', 'in_transit', NULL),
    ('SF1122334455', 'SF Express', 'delivered', 'the recipient, in person');

INSERT INTO logistics_events VALUES
    ('SF1234567890', '2026-06-19 16:02:00', 'Picked up at the Bit Select warehouse, Dongguan'),
    ('SF1234567890', '2026-06-20 03:15:00', 'Departed the Dongguan sorting center'),
    ('SF1234567890', '2026-06-21 09:40:00', 'Arrived at the Shenzhen Nanshan delivery station'),
    ('SF1234567890', '2026-06-22 10:05:00', 'Out for delivery'),
    ('SF1234567890', '2026-06-22 14:32:00', 'Delivered, signed for by the recipient in person'),
    ('YT9876543210', '2026-06-27 11:20:00', 'Picked up at the Bit Select warehouse, Hangzhou'),
    ('YT9876543210', '2026-06-28 06:45:00', 'Departed the Hangzhou sorting center'),
    ('YT9876543210', '2026-06-29 07:30:00', 'Arrived at the Guangzhou transit center'),
    ('SF1122334455', '2026-06-06 09:30:00', 'Picked up at the Bit Select warehouse, Dongguan'),
    ('SF1122334455', '2026-06-07 15:10:00', 'Out for delivery'),
    ('SF1122334455', '2026-06-07 18:44:00', 'Delivered, signed for by the recipient in person');

INSERT INTO refunds VALUES
    ('RF20260612001', '55008', 'one plug stopped switching after a week', 11800, 'completed',
     '2026-06-12 10:00:00');

INSERT INTO after_sales VALUES
    ('AS20260612001', '55008', 'refund', 'one plug stopped switching after a week', 'completed',
     '2026-06-12 09:41:00');

INSERT INTO cart_items VALUES
    ('u1001', 'P1007', 2),
    ('u1001', 'P1004', 1);

INSERT INTO devices VALUES
    ('D-S10-7781', 'u1001', 'P1001', 'Living room vacuum', 1, '3.2.1',
     'E05: main brush blocked'),
    ('D-PLUG-0042', 'u1001', 'P1006', 'Bedroom plug', 0, '1.0.4', NULL);

INSERT INTO knowledge VALUES
    ('KB001', 'Refund policy', 'after_sale',
     'refund refunds money back return policy 退款 退货 退钱',
     'A refund can be requested once the order is delivered (signed for). Orders that have not shipped '
     || 'are cancelled instead, and the payment is refunded automatically. Shipped orders that are not '
     || 'yet delivered can be refused at the door or refunded after delivery. Delivered items can be '
     || 'returned without a reason within 7 days. Refunds go back to the original payment method within '
     || '1-3 business days. Each order can be refunded once.'),
    ('KB002', 'Shipping and delivery times', 'shipping',
     'shipping delivery ship courier tracking logistics express 物流 发货 快递 配送',
     'Orders ship within 48 hours of payment from our warehouses in Dongguan and Hangzhou. Orders over '
     || 'CNY 999 ship with SF Express, others with SF Express or YTO Express. Delivery usually takes 1-3 days '
     || 'in mainland China. Use the tracking number on the order to follow the parcel.'),
    ('KB003', 'Warranty', 'after_sale',
     'warranty guarantee repair broken defect 保修 维修 质保',
     'Electronics carry a 1-year warranty. The Bit S10 Pro robot vacuum has a 2-year warranty on the main '
     || 'unit and 1 year on the battery. Consumables (filters, brushes) are not covered. For a repair, '
     || 'apply for an after-sale service of type repair on the order.'),
    ('KB004', 'Robot vacuum does not pick up dust', 'troubleshooting',
     'robot vacuum suction dust dirt clean s10 扫地机 吸灰 吸力 不吸灰',
     'If the Bit S10 Pro leaves dust behind: empty the dustbin; tap the filter clean and replace it every '
     || '3 months; remove the main brush and cut away tangled hair (error E05 means the main brush is '
     || 'blocked); set the suction to Turbo in the Bit Home app. If it still does not clean, contact support.'),
    ('KB005', 'Robot vacuum does not charge or return to the dock', 'troubleshooting',
     'robot vacuum charge charging dock battery s10 扫地机 充电 回充',
     'Wipe the charging contacts on the robot and the dock with a dry cloth. Leave 0.5 m free on both '
     || 'sides of the dock and 1.5 m in front of it. Restart the robot by holding the power button for 10 '
     || 'seconds.'),
    ('KB006', 'Cancelling an order or changing the address', 'orders',
     'cancel cancellation address change modify 取消 取消订单 地址 改地址 修改地址',
     'Orders can be cancelled, and their delivery address changed, until they ship (status pending_payment '
     || 'or paid). A paid order that is cancelled is refunded to the original payment method and any coupon '
     || 'used is returned. Once shipped, an order can no longer be cancelled or redirected.'),
    ('KB007', 'Pairing Bit earbuds and headphones', 'troubleshooting',
     'headphones earbuds pair pairing bluetooth airx bandpro 耳机 配对 蓝牙 连接',
     'Put the earbuds in the case, keep the lid open and hold the case button for 3 seconds until the light '
     || 'flashes white, then choose the device in the phone''s Bluetooth settings. For BandPro headphones, '
     || 'hold the power button for 5 seconds.'),
    ('KB008', 'Membership and coupons', 'membership',
     'member membership points level coupon coupons discount 会员 积分 优惠券 折扣',
     'Members earn 1 point per CNY spent. Gold members get free shipping on every order. Coupons have a '
     || 'minimum spend and an expiry date; one coupon can be used per order, and a coupon used on a '
     || 'cancelled order is returned.');

INSERT INTO diagnostics VALUES
    ('robot_vacuum', 'suction dust dirt pick clean 吸灰 吸力 不吸 扫不干净',
     'A full dustbin, a clogged filter or a main brush wrapped in hair',
     'Empty the dustbin|Tap the filter clean; replace it if it is older than 3 months|Remove the main brush and cut away tangled hair|Set the suction to Turbo in the Bit Home app'),
    ('robot_vacuum', 'charge charging dock battery 充电 回充 电量',
     'Dirty charging contacts or a dock placed in a cramped spot',
     'Wipe the charging contacts on the robot and the dock with a dry cloth|Leave 0.5 m free on both sides of the dock and 1.5 m in front|Restart the robot by holding the power button for 10 seconds'),
    ('robot_vacuum', 'offline wifi wi-fi network app connect 离线 联网 网络 连不上',
     'The robot lost the Wi-Fi connection',
     'Check that the router uses the 2.4 GHz band|Move the dock within range of the router|Re-add the robot in the Bit Home app'),
    ('robot_vacuum', 'e05 main brush blocked tangled hair 主刷 缠绕 毛发',
     'Error E05: the main brush is blocked, usually by hair wrapped around it',
     'Turn the robot over and unclip the main brush|Cut away the tangled hair and clear the brush ends|Refit the brush and clear the error in the Bit Home app'),
    ('robot_vacuum', 'noise loud stuck wheel 噪音 异响 卡住',
     'Debris caught in a wheel or the side brush',
     'Turn the robot over and remove debris from the wheels|Detach and clean the side brush'),
    ('headphones', 'pair pairing bluetooth connect 配对 蓝牙 连接 连不上',
     'The earbuds are paired with another phone or stuck in an old pairing',
     'Remove the device from the phone''s Bluetooth list|Reset the pairing by holding the case button for 10 seconds|Pair again'),
    ('headphones', 'one ear side sound volume quiet 单耳 没声音 声音小',
     'A dirty speaker mesh or an unbalanced audio setting',
     'Clean the speaker mesh with a dry soft brush|Check the left/right balance in the phone''s accessibility settings|Reset the earbuds'),
    ('smart_home', 'offline wifi wi-fi network app connect 离线 联网 网络 连不上',
     'The plug lost the Wi-Fi connection',
     'Check that the router uses the 2.4 GHz band|Hold the plug button for 5 seconds until it blinks fast|Re-add the plug in the Bit Home app');
